"""The shared view of a batch queue (issue 35): one ask per poll interval for every mxbatch
process of a user, whatever the number of followers; nothing asked about a job that has
ended. The unit tests run processes against a stand-in ``ask``; the cluster tests count
the real ``qstat``/``squeue`` calls through a PATH shim while several ``wait`` follow one
job on the SGE and Slurm test clusters."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from mxbatch.backends.batch.queueview import NOW, QueueView, Snapshot, ViewScope

from .clusterjobs import fake_spec
from .conftest import Cli, assert_no_processes, cluster_environment, wait_for

#: a view asked by several processes at once: each counts its asks in the file it is given
VIEW_USER = """
import json, sys, time
from pathlib import Path
from mxbatch.backends.batch.queueview import QueueView

path, log, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
def ask():
    with open(log, "a") as handle:
        handle.write("asked\\n")
    time.sleep(0.2)  # a slow scheduler: the others wait on the lock, then read
    return [("12", "1", "r")]
view = QueueView(path, ask, interval_s=60)
for _ in range(rounds):
    assert view.snapshot().rows == (("12", "1", "r"),)
"""


def test_processes_share_one_ask_per_interval(tmp_path):
    path, log = tmp_path / "queue" / "sge-x.json", tmp_path / "asks"
    procs = [subprocess.Popen([sys.executable, "-c", VIEW_USER, str(path), str(log), "20"])
             for _ in range(5)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert log.read_text().splitlines() == ["asked"]  # 100 looks, one ask
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert oct(path.parent.stat().st_mode & 0o777) == oct(0o700)


def test_an_old_snapshot_is_asked_again_and_a_fresh_one_is_not(tmp_path):
    asks: List[float] = []
    view = QueueView(tmp_path / "v.json", lambda: asks.append(time.time()) or [], 60)
    view.snapshot()
    view.snapshot()
    assert len(asks) == 1
    old = Snapshot(asked_at=time.time() - 61, rows=())
    (tmp_path / "v.json").write_text(old.to_json())
    view.snapshot()
    assert len(asks) == 2
    view.snapshot(NOW.max_age)  # a cancel's look: this one is young enough
    assert len(asks) == 2


def test_a_job_submitted_after_the_snapshot_is_queued_not_gone(tmp_path):
    view = QueueView(tmp_path / "v.json", lambda: [("12", "1", "r")], 60)
    snapshot, unknown = view.for_jobs(ViewScope(), ["12", "13"])
    assert unknown == set()  # ids saved long ago: 13 is gone
    _, unknown = view.for_jobs(ViewScope(known_since=time.time()), ["12", "13"])
    assert unknown == {"13"}  # saved after the snapshot: not known to be gone
    assert snapshot.rows == (("12", "1", "r"),)


# ----------------------------------------------------------------- the real clusters

SHIM = """#!/bin/sh
printf '%s %s\\n' "$(date +%s.%N)" "$*" >> "{log}"
exec "{real}" "$@"
"""


def shimmed(env: dict, tool: str, directory: Path, log: Path) -> dict:
    """``env`` with ``tool`` first on PATH: a shim that writes each call's time and
    arguments to ``log``, then runs the real one."""
    real = shutil.which(tool, path=env["PATH"])
    assert real, f"{tool} is not on the cluster's PATH"
    directory.mkdir(exist_ok=True)
    (directory / tool).write_text(SHIM.format(log=log, real=real))
    (directory / tool).chmod(0o755)
    return dict(env, PATH=f"{directory}{os.pathsep}{env['PATH']}")


def listings(log: Path, marker: str) -> List[float]:
    """The times of the calls that listed the queue (``marker`` in their arguments)."""
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [float(line.split()[0]) for line in lines if marker in line]


CLUSTERS = {
    "sge": ("qstat", "-xml", "submitter: qsub"),
    "slurm": ("squeue", "--user", ""),
}


@pytest.mark.parametrize("cluster", [pytest.param("sge", marks=pytest.mark.sge),
                                     pytest.param("slurm", marks=pytest.mark.slurm)])
def test_followers_share_the_queue_view_and_an_ended_job_asks_nothing(
        home, tmp_path, cluster):
    tool, marker, options = CLUSTERS[cluster]
    log = tmp_path / f"{tool}.log"
    env = shimmed(cluster_environment(cluster), tool, tmp_path / "shim", log)
    cli = Cli(home, env)
    spec = fake_spec(tmp_path, cluster, options, name=f"{cluster}-view", workers=1,
                     env={"FAKE_SLEEP": "20"})
    data = json.loads(spec.read_text())
    data["backends"][cluster]["poll_interval"] = "4s"
    spec.write_text(json.dumps(data))
    job = cli.submit(spec, "--backend", cluster)
    followers = [subprocess.Popen([sys.executable, "-m", "mxbatch", "wait", job, "--timeout",
                                   "300"], env=cli.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for _ in range(5)]
    codes = [f.wait(timeout=330) for f in followers]
    assert codes == [0] * 5, codes
    asked = listings(log, marker)
    span = max(asked) - min(asked)
    sys.stderr.write(f"NUMBERS {cluster}: 5 followers for {span:.0f}s asked {len(asked)} "
                     f"times (poll interval 4s)\n")
    # one ask per interval, give or take the first and the look that found the end
    assert len(asked) <= span / 4 + 3, (len(asked), span)
    # ended: once a look has written the job's final status into its record (the
    # followers' last looks, or a later one once the queue has let go of every task),
    # status, list, wait and clean ask nothing more
    record = home / "jobs" / f"{job}.json"
    wait_for(lambda: cli.status(job)["state"] == "SUCCEEDED"
             and (json.loads(record.read_text()).get("final") or {}).get("state")
             == "SUCCEEDED", 60, "the job's final status in its record")
    log.write_text("")
    for command in (["status", job], ["list"], ["wait", job], ["clean", job]):
        assert cli.run(*command).returncode == 0
        assert listings(log, marker) == [], command
    assert_no_processes(job)


@pytest.mark.slurm
def test_an_array_over_the_clusters_max_array_size_is_refused_before_queueing(home,
                                                                            tmp_path):
    """The Slurm test cluster, reconfigured with MaxArraySize=8 for this test: a job of 10
    workers is refused with the limit named (exit 2, spec file and key), nothing queued;
    8 workers still go."""
    env = cluster_environment("slurm")
    conf = Path(env["SLURM_CONF"])
    original = conf.read_text()
    cli = Cli(home, env)
    try:
        conf.write_text(original + "MaxArraySize=8\n")
        subprocess.run(["scontrol", "reconfigure"], env=env, check=True, timeout=60)
        shown = subprocess.run(["scontrol", "show", "config"], env=env, text=True,
                               capture_output=True, check=True).stdout
        assert any(line.split() == ["MaxArraySize", "=", "8"] for line in shown.splitlines())
        spec = fake_spec(tmp_path, "slurm", "submitter: sbatch", name="wide", workers=10,
                         env={"FAKE_SLEEP": "1"})
        result = cli.run("submit", "--backend", "slurm", str(spec))
        assert result.returncode == 2, result.stderr
        assert "roles.worker.count" in result.stderr and "MaxArraySize is 8" in result.stderr
        assert "het: true" in result.stderr and "Traceback" not in result.stderr
        assert not list((home / "jobs").glob("wide-*.json")) if (home / "jobs").is_dir() \
            else True
        queued = subprocess.run(["squeue", "--noheader", "--format", "%j"], env=env,
                                text=True, capture_output=True, check=True).stdout
        assert "wide" not in queued
    finally:
        conf.write_text(original)
        subprocess.run(["scontrol", "reconfigure"], env=env, timeout=60)


@pytest.mark.parametrize("cluster", [pytest.param("sge", marks=pytest.mark.sge),
                                     pytest.param("slurm", marks=pytest.mark.slurm)])
def test_doctor_shows_the_poll_interval_the_queue_and_one_querys_time(home, cluster):
    cli = Cli(home, cluster_environment(cluster))
    result = cli.run("doctor", "--backend", cluster, "--no-probe", "--json", timeout=120)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    detail = checks["queue view"]["detail"]
    assert checks["queue view"]["ok"], detail
    assert "tasks in the queue) took" in detail and f"{cluster}.poll_interval" in detail
