"""Helpers the test suite (and a few benchmarks) share across folders — one place, importable as
``jalapeno.testing.<module>``; nothing in the package itself imports them.

* ``engine_fakes`` — an analytic cost model (:class:`FakeCostModel`) and a token-echo backend for scheduler and
  simulator tests (no ``jalapeno.perf`` numbers involved);
* ``report_fakes`` — a fake sweep point function for the report/sweep tests;
* ``torch_models`` — tiny random-weight Hugging Face models of every supported family (imports torch and
  transformers: only torch tests import it).
"""
