"""Fixtures for the report tests; the fake point function lives in ``report_fakes``."""

from __future__ import annotations

import pytest
from report_fakes import CALLS


@pytest.fixture
def calls():
    CALLS.clear()
    yield CALLS
    CALLS.clear()
