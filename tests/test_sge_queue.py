"""What mxbatch asks SGE's qmaster (issue 35): only for its user's own jobs, never the whole
cell. Another Unix user (made by the test rig) holds a job in the queue; a stand-in job is
followed to its end while a PATH shim around ``qstat`` writes down every call."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mxbatch.runtime.trust import user_name

from .clusterjobs import fake_spec, sge_queued, wait_queue_empty
from .conftest import Cli, assert_no_processes

pytestmark = pytest.mark.sge

OTHER = "mxbatch-neighbour"


@pytest.fixture(scope="module")
def neighbour() -> str:
    """A second Unix user (made once, idempotently), for a busy neighbour's work."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test makes a second user and submits as it")
    if subprocess.run(["id", "-u", OTHER], capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", OTHER], capture_output=True, text=True)
        if made.returncode not in (0, 9):  # 9: made in the meantime
            pytest.fail(f"useradd {OTHER}: {made.stderr}")
    return OTHER


def as_user(user: str, argv: list) -> list:
    return ["setpriv", "--reuid", user, "--regid", user, "--init-groups", *argv]


def qstat_shim(directory: Path, log: Path, env: dict) -> dict:
    """``env`` with a ``qstat`` first on PATH that writes its arguments to ``log`` (one
    call a line) and runs the real one."""
    real = shutil.which("qstat", path=env["PATH"])
    assert real, "qstat is not on the SGE cell's PATH"
    directory.mkdir()
    shim = directory / "qstat"
    shim.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(0o755)
    return dict(env, PATH=f"{directory}{os.pathsep}{env['PATH']}")


def test_only_the_users_own_jobs_are_asked_for(sge, home, tmp_path, neighbour):
    env = sge.env
    held = subprocess.run(as_user(neighbour, ["qsub", "-h", "-b", "y", "-o", "/dev/null",
                                              "-e", "/dev/null", "/bin/true"]),
                          env=env, capture_output=True, text=True, cwd="/", timeout=60)
    assert held.returncode == 0, held.stderr
    foreign = held.stdout.split()[2]  # "Your job 123 ("true") has been submitted"
    try:
        everyone = subprocess.run(["qstat", "-u", "*"], env=env, capture_output=True,
                                  text=True, check=True).stdout
        assert foreign in everyone.split()  # the neighbour's job is in the cell
        log = tmp_path / "qstat.log"
        cli = Cli(home, qstat_shim(tmp_path / "shim", log, env))
        spec = fake_spec(tmp_path, "sge", "submitter: qsub", name="own", workers=1,
                         env={"FAKE_SLEEP": "2"})
        job = cli.submit(spec, "--backend", "sge")
        result = cli.run("wait", job, "--timeout", "120")
        assert result.returncode == 0, result.stderr
        assert cli.status(job)["state"] == "SUCCEEDED"
        calls = log.read_text().splitlines()
        listings = [c for c in calls if c.startswith("-xml")]
        assert listings, calls
        me = user_name(os.getuid())
        assert all(c.endswith(f"-u {me}") for c in listings), calls
        assert not any("*" in c.split() for c in calls), calls
        wait_queue_empty(lambda: sge_queued(cli, job), job, 60)
        assert_no_processes(job)
    finally:
        subprocess.run(["qdel", foreign], env=env, capture_output=True)
