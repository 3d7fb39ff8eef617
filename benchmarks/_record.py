"""The closing lines every offline timing script shares: the load after the run, and its JSON record.

A record names when and by which script it was made and the machine's load before and after, then the script's own
fields in the order given (``docs/performance.md``: every table names its machine and load).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path


def finish(out: Path | None, script: str, load0: float, **fields) -> None:
    """Print the load average after the run; with ``out``, write the run's record there."""
    load1 = os.getloadavg()[0]
    print(f"load average after: {load1:.1f}")
    if out:
        when = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
        out.write_text(json.dumps({
            "recorded": f"{when} by benchmarks/{script}",
            "machine": f"{os.cpu_count()} cpus, load average {load0:.1f} -> {load1:.1f}", **fields}, indent=1) + "\n")
