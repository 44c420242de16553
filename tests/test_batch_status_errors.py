"""A failing ``squeue``/``qstat`` during ``mxbatch status`` is the backend being
unavailable (exit 3, with what to set), never a problem of the spec (exit 2), and no
traceback: the real CLI against a job record, with a failing stand-in of the
scheduler's status command first on PATH (no cluster)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mxbatch.backends import records as job_records
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

from .conftest import Cli

SPEC = "name: down\ncommand: python3 train.py\nroles: {worker: {count: 2}}\n"

#: backend -> (status command, what it says when it fails, the hint that must follow)
CASES = {
    "slurm": ("squeue", "slurm_load_jobs error: Unable to contact slurm controller "
                        "(connect failure)", "SLURM_CONF"),
    "sge": ("qstat", "error: commlib error: got select error (Connection refused)\n"
                     "unable to send message to qmaster using port 6444", "SGE_ROOT="),
}
#: a failure in words mxbatch does not know: still the backend, not the spec
UNKNOWN_WORDS = "error: the status daemon had a bad day"


def _submitted_record(tmp_path: Path, home: Path, backend: str) -> str:
    """A job record and run directory as ``submit`` leaves them (no job was queued);
    the record goes under ``$MXBATCH_HOME`` (the ``home`` fixture sets it)."""
    spec = specs.parse(SPEC + f"rendezvous: {{dir: {home / 'runs'}}}\n", tmp_path / "down.yaml")
    plan = planning.make(spec, backend, job_id="down-00000001", python="/venv/bin/python")
    layout = plan.run.layout
    Path(layout.root).mkdir(parents=True)
    Path(layout.plan).write_text(plan.run.to_json())
    ids = {"scheduler": "12", "server": "13", "worker": "14"}
    job_records.save(job_records.JobRecord(
        job_id=plan.job_id, backend=backend, run_dir=layout.root,
        handle={"submitter": "drmaa" if backend == "sge" else "sbatch", "job_ids": ids}))
    return plan.job_id


def _failing_tool(bin_dir: Path, name: str, words: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{words}\nEOF\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("words", ["known", "unknown"])
@pytest.mark.parametrize("backend", sorted(CASES))
def test_a_failing_status_command_is_the_backend_unavailable(cli: Cli, home, tmp_path,
                                                             backend, words):
    tool, known, hint = CASES[backend]
    said = known if words == "known" else UNKNOWN_WORDS
    job = _submitted_record(tmp_path, home, backend)
    _failing_tool(tmp_path / "bin", tool, said)
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{cli.env['PATH']}",
           "SGE_ROOT": str(tmp_path / "sge")}
    result = cli.run("status", job, env=env)
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert said.splitlines()[0] in result.stderr and hint in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and f"backends.{backend}" not in result.stderr
