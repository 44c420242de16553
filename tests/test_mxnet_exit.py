"""MXNet's exit hang, for real (MXNet 1.9.1, dist_sync, the local backend): workers that
hang at exit are ended and the job succeeds naming them; the uneven-batch deadlock of
apache/mxnet#7888 fails naming it; a role with another MXNet version fails at start.

The hang is MXNet's own, from ``examples/image_classification.py --uneven-batches``: the
worker with one batch more leaves its last push unanswered, so both workers' code ends
and then the one blocks in MXNet's atexit ``_notify_shutdown`` (the engine's
``WaitForAll``), the other in ``KVStore.__del__`` (the exit barrier), as gdb shows; with
two batches more, that worker blocks in its next forward pass instead, its code never
ends. The other MXNet version is a stand-in: a package ``mxnet`` saying 1.8.0 (its
``libinfo.py``), first on the server's PYTHONPATH, that blocks as a mismatched ps-lite
would (a second MXNet in a second venv costs minutes and a gigabyte)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from mxbatch.runtime.layout import RunLayout

from .conftest import EXAMPLES, assert_no_processes, job_times

pytestmark = pytest.mark.mxnet

EXIT_TIMEOUT = 10
EXIT_GRACE = 5  # the default
GRACE = 3


def launch(cli, tmp_path: Path, *script_args: str, options=(),
           exit_timeout: str = f"{EXIT_TIMEOUT}s"):
    shutil.copy(EXAMPLES / "image_classification.py", tmp_path / "image_classification.py")
    return cli.run("launch", "-n", "2", "-s", "2", "--grace", f"{GRACE}s",
                   "--exit-timeout", exit_timeout, *options, "--", "python3",
                   "image_classification.py", *script_args, cwd=tmp_path, timeout=300)


def test_workers_hanging_at_exit_are_ended_and_the_job_succeeds(cli, tmp_path):
    """Both workers' code ends, then both hang in MXNet's exit: training is over, so each
    is ended ``exit_grace`` (default 5 s) after the last worker's code finished, not
    ``exit_timeout`` (60 s) after its own, and the servers and the scheduler at once."""
    result = launch(cli, tmp_path, "--uneven-batches", "1", exit_timeout="60s")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[worker rank=0] done after 13 steps" in result.stdout
    assert "[worker rank=1] done after 12 steps" in result.stdout
    assert re.search(r"note: MXNet's exit hang: worker\[0\] \(hung \d+s\) and worker\[1\] "
                     r"\(hung \d+s\) were ended by mxbatch", result.stderr), result.stderr[-2000:]
    job = result.stdout.split()[0]
    times = job_times(cli.run_dir(job))
    workers = [times.tasks[f"worker[{rank}]"] for rank in (0, 1)]
    all_finished = max(w["code_finished_at"] for w in workers)
    for record in workers:
        assert record["state"] == "SUCCEEDED" and record["environment"]["mxnet"] == "1.9.1"
        assert "exit hang" in record["note"]
        assert EXIT_GRACE <= record["ended_at"] - all_finished < EXIT_GRACE + 4
    ended = times.last_end - all_finished
    sys.stderr.write(f"NUMBERS exit hang: job ended {ended:.1f}s after the last worker's "
                     f"code finished (exit_grace {EXIT_GRACE}s, exit_timeout 60s); "
                     f"{times.last_end - times.first_start:.1f}s from the first task's "
                     f"start\n")
    assert ended < EXIT_GRACE + 5
    assert cli.status(job)["state"] == "SUCCEEDED"
    assert_no_processes(job)


def test_the_uneven_batch_deadlock_fails_naming_it(cli, tmp_path):
    result = launch(cli, tmp_path, "--uneven-batches", "2")
    assert result.returncode == 1, result.stderr[-3000:]
    found = re.search(r"FAILED: worker\[(\d)\] finished; worker\[(\d)\] blocked (\d+)s in MXNet "
                      r"\(mxnet/.*\), from image_classification\.py:\d+ in \w+ \(.*\) \(no CPU "
                      r"and no output; rendezvous.exit_timeout \d+s\); batches pushed \(the most "
                      r"pushes of one kvstore key\): worker\[0\] \d+, worker\[1\] \d+: the "
                      r"workers ran different numbers of batches", result.stderr)
    assert found, result.stderr[-2000:]
    assert found.group(1) != found.group(2) and int(found.group(3)) >= EXIT_TIMEOUT
    job = result.stdout.split()[0]
    run_dir = cli.run_dir(job)
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    assert abort["end"] == "exit_hang" and abort["rank"] == int(found.group(2))
    finished = job_times(run_dir).tasks[f"worker[{found.group(1)}]"]["code_finished_at"]
    sys.stderr.write(f"NUMBERS deadlock: named {abort['at'] - finished:.1f}s after "
                     f"worker[{found.group(1)}]'s code finished\n")
    assert abort["at"] - finished < EXIT_TIMEOUT + 12  # idle exit_timeout, a heartbeat
    assert_no_processes(job)


def test_a_role_with_another_mxnet_version_fails_the_job_at_start(cli, tmp_path):
    stand_in = tmp_path / "other" / "mxnet"
    stand_in.mkdir(parents=True)
    (stand_in / "libinfo.py").write_text('__version__ = "1.8.0"\n')
    (stand_in / "__init__.py").write_text("import time\ntime.sleep(600)  # a ps-lite that "
                                          "cannot talk to the others\n")
    result = launch(cli, tmp_path, options=("--env-server", f"PYTHONPATH:{stand_in.parent}"))
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r"FAILED: environment mismatch: server\[\d\] runs Python [\d.]+ \(.*\), "
                     rf"MXNet 1\.8\.0 \({re.escape(str(stand_in))}\), but scheduler\[0\] runs "
                     r"Python [\d.]+ \(.*\), MXNet 1\.9\.1 \(.*/site-packages/mxnet\)",
                     result.stderr), result.stderr[-2000:]
    job = result.stdout.split()[0]
    run_dir = cli.run_dir(job)
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    # the server's role starts once the scheduler listens (its record's reached_at)
    listening = job_times(run_dir).tasks["scheduler[0]"]["reached_at"]
    assert abort["startup"] and abort["at"] - listening < 5
    assert_no_processes(job)
