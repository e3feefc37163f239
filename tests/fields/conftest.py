"""Shared by the FDB5 store's tests: they need the store installed for FDB (scripts/setup.sh)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from hetmem import fields  # noqa: E402


@pytest.fixture(autouse=True)
def needs_the_plugin():
    try:
        problem = fields.plugin_problem()
    except Exception as e:  # the FDB packages themselves are missing
        problem = str(e)
    if problem:
        pytest.skip(problem)
