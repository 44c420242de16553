"""Both test clusters' environments at once (a site that loads both schedulers' modules):
sge.env's DRMAA_LIBRARY_PATH names Grid Engine's libdrmaa, and ``submitter: auto``
must not hand a Slurm job to it (issue 18, bug 13: "Slurm rejected the job: code 17:
invalid option argument --cpus-per-task=1", blaming Slurm). Stand-in jobs through
both real clusters; the decision itself is unit-tested in test_backend_environment.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict

import pytest

from .clusterjobs import fake_spec, run_dir_of, sge_queued, slurm_queued, wait_queue_empty
from .conftest import Cli, assert_no_processes, cluster_env_file

pytestmark = [pytest.mark.sge, pytest.mark.slurm]


def both_clusters_environment() -> Dict[str, str]:
    """The environment after sourcing sge.env, then slurm.env, in one shell."""
    script = (f'. "{cluster_env_file("sge")}" && . "{cluster_env_file("slurm")}" '
              "&& env -0")
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    return dict(item.decode().split("=", 1) for item in out.split(b"\0") if b"=" in item)


@pytest.fixture
def both(home) -> Cli:
    cli = Cli(home, both_clusters_environment())
    assert cli.env.get("DRMAA_LIBRARY_PATH"), "sge.env names Grid Engine's DRMAA library"
    return cli


def _submitter_of(cli: Cli, job: str) -> str:
    """The submitter the job's record says it went through."""
    return cli.handle(job)["submitter"]


@pytest.mark.parametrize("backend, submitter, queued", [
    ("slurm", "sbatch", slurm_queued), ("sge", "drmaa", sge_queued)])
def test_auto_submits_to_each_cluster_through_its_own_tools(both, tmp_path, backend,
                                                            submitter, queued):
    """Auto with Grid Engine's library named: Slurm submits with sbatch, SGE through
    that library; both jobs succeed."""
    spec = fake_spec(tmp_path, backend, "submitter: auto", name=f"both-{backend}",
                     env={"FAKE_SLEEP": "1"})
    result = both.run("submit", "--wait", "--backend", backend, str(spec), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "rejected the job" not in result.stderr
    job = result.stdout.split()[0]
    assert _submitter_of(both, job) == submitter
    assert both.status(job)["state"] == "SUCCEEDED"
    assert run_dir_of(both, job).is_dir()
    wait_queue_empty(lambda: queued(both, job), job, 60)
    assert_no_processes(job)


def test_slurm_with_an_explicit_drmaa_submitter_and_grid_engine_s_library_is_exit_3(
        both, tmp_path):
    spec = fake_spec(tmp_path, "slurm", "submitter: drmaa", name="both-explicit")
    result = both.run("submit", "--backend", "slurm", str(spec))
    assert result.returncode == 3, result.stderr
    library = both.env["DRMAA_LIBRARY_PATH"]
    assert f"the DRMAA library is {library}, whose DRM system is 'SGE" in result.stderr
    assert "not a Slurm library" in result.stderr and "submitter: sbatch" in result.stderr
    assert both.run_dirs() == [] and not Path(both.home / "jobs").exists()
