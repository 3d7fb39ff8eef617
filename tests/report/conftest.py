"""Fixtures for the report tests; the fake point function lives in ``jalapeno.testing.report_fakes``."""

from __future__ import annotations

import pytest
from jalapeno.testing.report_fakes import CALLS


@pytest.fixture
def calls():
    CALLS.clear()
    yield CALLS
    CALLS.clear()
