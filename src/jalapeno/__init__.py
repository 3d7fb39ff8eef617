"""Jalapeño: an inference-first accelerator stack in software.

Three pillars share one design: a chip twin and serving simulator (``hardware``, ``models``, ``perf``,
``engine`` + ``sim``), a real inference engine (``engine`` + ``backends.torch``, ``quant``,
``kernels``, ``server``) and a bench client (``bench``); ``metrics`` serves both.

First thing: the optional native build (``jalapeno build-native``) serves the compiled per-event modules when it
was made from exactly these sources; otherwise, and with ``JALAPENO_NATIVE=0``, everything is the Python source.
"""

from jalapeno.native import activate as _activate_native

_activate_native()

__version__ = "0.1.0"
