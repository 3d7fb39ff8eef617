"""``jalapeno demo``: the README's main job on embedded defaults (no PyTorch, no network, under a minute)."""
