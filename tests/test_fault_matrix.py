"""The fault matrix (``faultmatrix``) on every backend whose cluster is up: each cell
ends the job, names the task and the cause, and leaves nothing running or queued."""

from __future__ import annotations

import pytest

from .faultmatrix import PROFILES, Fault, run_cell

FAULTS = pytest.mark.parametrize("fault", list(Fault), ids=[f.name.lower() for f in Fault])


@FAULTS
def test_local(cli, tmp_path, fault):
    cell = run_cell(cli, PROFILES["local"], fault, tmp_path)
    assert cell.ok, cell.problem
