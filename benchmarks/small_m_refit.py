"""Refit a probed chip's small-M terms from the measurements its YAML records, without probing again.

    jalapeno hardware probe                                  # measures; writes ~/.cache/jalapeno/hardware/local.yaml
    python benchmarks/small_m_refit.py IN.yaml OUT_DIR      # fits; writes OUT_DIR/local.yaml

The fit of ``efficiency.compute_by_rows`` / ``compute_memory_overlap`` (docs/cost-model.md "Small-M GEMMs";
``jalapeno.calibration.probe_fit``) needs the cost model, which the hardware package (where the probe lives) may
not import, so it is this second step. A probe's notes hold the decode steps by batch, the GEMM rates by rows and
the prefill step the fit needs; OUT_DIR may be IN's own directory (the file is then replaced).
Then simulate with ``--hardware-dir OUT_DIR`` (or ``JALAPENO_CACHE`` pointing at OUT_DIR's parent for ``local``).
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

import yaml

from jalapeno.calibration.probe_fit import fitted_chip_dict, probe_from_chip
from jalapeno.hardware.catalog import load_spec_file


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    chip = load_spec_file(src)
    data = fitted_chip_dict(probe_from_chip(chip), chip.key, f"benchmarks/small_m_refit.py {src.name} "
                        f"({_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC)")
    data["notes"] = [*chip.notes, "small-M terms refitted from the notes above by benchmarks/small_m_refit.py"]
    data["description"] = chip.description
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{chip.key}.yaml"
    path.write_text(f"# {chip.key}: {src.name} with its small-M terms refitted (benchmarks/small_m_refit.py)\n"
                    + yaml.safe_dump(data, sort_keys=False, width=120), encoding="utf-8")
    eff = load_spec_file(path).efficiency
    print(f"{path}: compute_default {eff.compute_default}, memory_default {eff.memory_default}, "
          f"compute_memory_overlap {eff.compute_memory_overlap}")
    if "compute_memory_overlap" in eff.fitted:
        print(eff.fitted["compute_memory_overlap"].note)

if __name__ == "__main__":
    main()
