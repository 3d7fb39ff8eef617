"""Refit a probed chip's small-M terms from the measurements its YAML records, without probing again.

    jalapeno hardware probe                                  # measures; writes ~/.cache/jalapeno/hardware/local.yaml
    python benchmarks/small_m_refit.py IN.yaml OUT_DIR      # fits; writes OUT_DIR/local.yaml
    jalapeno calibrate --probe IN.yaml [--out OUT_DIR]      # the same fit from the CLI (a thin caller of both:
                                                            # jalapeno.calibration.probe_fit.refit_probe_file)

The fit of ``efficiency.compute_by_rows`` / ``compute_memory_overlap`` (docs/cost-model.md "Small-M GEMMs";
``jalapeno.calibration.probe_fit``) needs the cost model, which the hardware package (where the probe lives) may
not import, so it is this second step. A probe's notes hold the decode steps by batch, the GEMM rates by rows and
the prefill step the fit needs; OUT_DIR may be IN's own directory (the file is then replaced).
Then simulate with ``--hardware-dir OUT_DIR`` (or ``JALAPENO_CACHE`` pointing at OUT_DIR's parent for ``local``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from jalapeno.calibration.probe_fit import refit_probe_file


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    print(refit_probe_file(src, out, f"benchmarks/small_m_refit.py {src.name}")[1])


if __name__ == "__main__":
    main()
