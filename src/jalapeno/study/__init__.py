"""The Jalapeño study (docs/jalapeno-study.md): do the seeds' claims follow from a plausible chip?

* ``design`` — models, workloads, concurrencies, baselines, claims, layouts; Jalapeño's inferred
  :class:`~jalapeno.study.design.Params` and the chip they give (:func:`~jalapeno.study.design.jalapeno_chip`);
* ``points`` — one simulated InferenceX point per :class:`~jalapeno.study.points.Task` (the simulator's factory);
* ``stats``  — the claim statistics (Pareto fronts from ``report.pareto``);
* ``fit``    — the loss and the coordinate search over the parameters;
* ``report`` — the tables and plots.

``benchmarks/jalapeno_study.py`` is the command line.
"""
