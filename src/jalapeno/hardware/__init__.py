"""Hardware as data: chip specs (``schema``), the YAML catalogue (``catalog``) and the ``hardware`` CLI."""

from jalapeno.hardware.catalog import (
    Catalog,
    chip_summary,
    clear_cache,
    get_chip,
    iter_facts,
    list_chips,
    load_catalog,
    load_spec_file,
    normalize_name,
)
from jalapeno.hardware.schema import ChipSpec, Efficiency, Energy, Fact, MemoryLevel, NetworkLink, Power, Price

__all__ = [
    "Catalog",
    "ChipSpec",
    "Efficiency",
    "Energy",
    "Fact",
    "MemoryLevel",
    "NetworkLink",
    "Power",
    "Price",
    "chip_summary",
    "clear_cache",
    "get_chip",
    "iter_facts",
    "list_chips",
    "load_catalog",
    "load_spec_file",
    "normalize_name",
]
