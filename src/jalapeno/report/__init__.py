"""Answers from the simulator: sweeps, economics, Pareto fronts, ``recommend`` and the HTML report.

* ``spec`` — the sweep YAML (pydantic, errors name the line); ``grid`` — expansion into points, ``auto`` layouts;
* ``pool`` — :func:`~jalapeno.report.pool.run_point` (the one adapter to ``jalapeno simulate``), process
  pool / Ray drivers; ``store`` — crash-safe part files compacted into ``results.parquet``; ``sweep`` — glue;
* ``economics`` — tokens/J, tokens/MW, $/Mtok (pure); ``pareto`` — fronts (pure);
* ``recommend`` — chip + layout ranking under SLOs with reasons; ``html`` — the self-contained report;
* ``commands`` — ``jalapeno sweep | recommend | report``. See docs/report.md.
"""
