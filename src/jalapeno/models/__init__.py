"""Model architectures: a catalogue of Hugging Face configs and exact parameter / KV / weight-byte counts.

``load_model("deepseek-r1")`` (or an HF id, or a path to a config.json) gives a :class:`ModelArch`.
Nothing here imports torch.
"""

from jalapeno.models.arch import BYTES_PER_ELEMENT, KV_BYTES_PER_ELEMENT, ModelArch, ParamCounts
from jalapeno.models.catalog import CatalogEntry, catalog_entry, list_models, load_config_file, load_model, resolve_name
from jalapeno.models.hf_config import FAMILIES, arch_from_config

__all__ = [
    "BYTES_PER_ELEMENT",
    "KV_BYTES_PER_ELEMENT",
    "FAMILIES",
    "CatalogEntry",
    "ModelArch",
    "ParamCounts",
    "arch_from_config",
    "catalog_entry",
    "list_models",
    "load_config_file",
    "load_model",
    "resolve_name",
]
