"""`jalapeno simulate` start-up shortcuts change no answer: a built-in chip found from the files' name lines
(only its own file validated) is the chip the full catalogue resolves, for every accepted name."""

import pytest

from jalapeno.errors import UnknownNameError
from jalapeno.hardware import catalog


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv(catalog.ENV_VAR, raising=False)
    catalog.clear_cache()
    yield
    catalog.clear_cache()


def test_every_name_resolves_to_the_full_catalogues_chip(fresh):
    full = catalog.load_catalog()
    names = full.names() + ["H200", "tpu_v6e", "Jalapeño", "NVIDIA H200", "b200sxm", "gb200 nvl72"]
    for n in names:
        catalog.clear_cache()  # the shortcut runs only while the full catalogue is not loaded
        try:
            want = full.resolve(n)
        except UnknownNameError:
            with pytest.raises(UnknownNameError):
                catalog.get_chip(n)
            continue
        got = catalog.get_chip(n)
        assert got == want, n
        assert not catalog._builtin.cache_info().currsize, f"{n}: fell back to the full catalogue"


def test_only_the_chosen_file_is_validated(fresh, monkeypatch):
    seen = []
    real = catalog.load_spec_file
    monkeypatch.setattr(catalog, "load_spec_file", lambda p: seen.append(p) or real(p))
    assert catalog.get_chip("h200").key == "h200"
    assert [p.name for p in seen] == ["h200.yaml"]


def test_unknown_name_error_is_the_full_catalogues(fresh):
    with pytest.raises(UnknownNameError) as fast:
        catalog.get_chip("h2000")
    with pytest.raises(UnknownNameError) as full:
        catalog.load_catalog().resolve("h2000")
    assert str(fast.value) == str(full.value)
    assert "did you mean" in str(fast.value)


def test_user_directories_use_the_full_catalogue(fresh, tmp_path):
    (tmp_path / "mine.yaml").write_text((catalog.BUILTIN_DIR / "h200.yaml").read_text(encoding="utf-8"))
    assert catalog.get_chip("h200", [tmp_path]) == catalog.load_catalog([tmp_path]).resolve("h200")
    assert catalog.load_catalog([tmp_path]).origin["h200"].parent == tmp_path
