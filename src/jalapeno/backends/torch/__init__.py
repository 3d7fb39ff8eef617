"""Real execution on PyTorch: model families, paged attention, weight loaders, sampler and the backend.

Importing this package imports torch; the CLI imports it lazily.
"""
