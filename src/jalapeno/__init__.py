"""Jalapeño: an inference-first accelerator stack in software.

Three pillars share one design: a chip twin and serving simulator (``hardware``, ``models``, ``perf``,
``engine`` + ``sim``), a real inference engine (``engine`` + ``backends.torch``, ``quant``,
``kernels``, ``server``) and a bench client (``bench``); ``metrics`` serves both.
"""

__version__ = "0.1.0"
