"""Fixtures for the torch-backend tests (helpers live in ``jalapeno.testing.torch_models``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from jalapeno.testing.torch_models import build_hf  # noqa: E402

# two cores shared with other processes: intra-op threads only add contention for tiny shapes
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """``tiny_model(family) -> (hf_model, checkpoint_dir)``; each family built and saved once per session."""
    cache: dict[str, tuple] = {}

    def get(family: str):
        if family not in cache:
            model = build_hf(family)
            path = tmp_path_factory.mktemp(family)
            model.save_pretrained(path)
            cache[family] = (model, path)
        return cache[family]

    return get


