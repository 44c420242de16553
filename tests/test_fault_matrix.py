"""The fault matrix (``faultmatrix``) on every backend whose cluster is up (local, SGE,
Slurm, YARN): each cell ends the job, names the task and the cause, and leaves nothing
running or queued."""

from __future__ import annotations

import pytest

from .faultmatrix import PROFILES, Fault, run_cell

FAULTS = pytest.mark.parametrize("fault", list(Fault), ids=[f.name.lower() for f in Fault])


@FAULTS
def test_local(cli, tmp_path, fault):
    cell = run_cell(cli, PROFILES["local"], fault, tmp_path)
    assert cell.ok, cell.problem


@pytest.fixture
def cluster_cli(request, home):
    from .conftest import Cli, cluster_environment

    return Cli(home, cluster_environment(request.param))


@pytest.mark.sge
@FAULTS
@pytest.mark.parametrize("cluster_cli", ["sge"], indirect=True)
def test_sge(cluster_cli, tmp_path, fault):
    cell = run_cell(cluster_cli, PROFILES["sge"], fault, tmp_path)
    assert cell.ok, cell.problem


@pytest.mark.slurm
@FAULTS
@pytest.mark.parametrize("cluster_cli", ["slurm"], indirect=True)
def test_slurm(cluster_cli, tmp_path, fault):
    cell = run_cell(cluster_cli, PROFILES["slurm"], fault, tmp_path)
    assert cell.ok, cell.problem


@pytest.fixture(scope="module")
def yarn_env():
    """The YARN cluster's environment with a skein driver of the matrix's own."""
    from .conftest import cluster_environment

    with PROFILES["yarn"].session(cluster_environment("yarn")) as env:
        yield env


@pytest.mark.yarn
@FAULTS
def test_yarn(yarn_env, home, tmp_path, fault):
    from .conftest import Cli

    cell = run_cell(Cli(home, yarn_env), PROFILES["yarn"], fault, tmp_path)
    assert cell.ok, cell.problem
