"""The file rendezvous on storage that caches like an NFS client (ci/clusters/cachefs):
writers and readers on different clients (mount namespaces with caches of their own),
and a real MXNet job whose tasks are spread over three clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from mxbatch.backends import rundir
from mxbatch.runtime.layout import RunLayout
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

from .conftest import cluster_env_file, cluster_environment, copy_example
from .test_mxnet_local import assert_trained

pytestmark = pytest.mark.cachefs

ROOT = Path(__file__).resolve().parent.parent
READER = """
import json, sys
sys.path.insert(0, {root!r})
from mxbatch.runtime.rendezvous import FileRendezvous
from mxbatch.runtime.roles import Role
rdv = FileRendezvous({run_dir!r})
s, a, d = rdv.read_scheduler(), rdv.read_abort(), rdv.read_digest()
t = rdv.read_task(Role.WORKER, 0)
print(json.dumps({{"scheduler": s and s.to_dict(), "abort": a and a.reason,
                   "digest": d and d.seq, "worker": t and t.state.value}}))
"""
WRITER = """
import sys
sys.path.insert(0, {root!r})
from mxbatch.runtime.rendezvous import FileRendezvous
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import *
rdv = FileRendezvous({run_dir!r})
rdv.publish_scheduler(SchedulerRecord(job_id="j", ip="127.0.0.1", port=9123, listening=True))
rdv.write_task(TaskRecord(role=Role.WORKER, rank=0, state=TaskState.RUNNING))
rdv.publish_digest(DigestRecord(job_id="j", seq=7))
print(rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason={reason!r})))
"""


@pytest.fixture(scope="module")
def cachefs() -> Dict[str, str]:
    if not cluster_env_file("cachefs").is_file():
        pytest.skip("cachefs is not up (ci/clusters/cachefs-up.sh)")
    return cluster_environment("cachefs")


def on_client(cachefs: Dict[str, str], client: int, argv: List[str],
              extra_env: Optional[Dict[str, str]] = None, **kwargs):
    """``argv`` running on client ``client`` (in its mount namespace)."""
    return subprocess.Popen([cachefs["MXBATCH_CACHEFS_EXEC"], str(client), *argv], cwd="/",
                            env=dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {})),
                            text=True, **kwargs)


def python_on(env: Dict[str, str], client: int, code: str) -> str:
    proc = on_client(env, client, [sys.executable, "-c", code], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip()


def new_run_dir(env: Dict[str, str], spec_text: str, base: Path) -> planning.JobPlan:
    """A job's run directory in the shared directory, made from the root namespace
    (the export's own, uncached view), as the CLI makes it."""
    base.mkdir(parents=True, exist_ok=True)
    path = base / "job.yaml"
    shared = Path(env["MXBATCH_CACHEFS_MNT"]) / f"t-{uuid.uuid4().hex[:8]}"
    path.write_text(spec_text + f"rendezvous: {{dir: {shared}, startup_timeout: 3m, "
                                f"grace: 5s}}\n")
    job = planning.make(specs.load(path), "cachefs", loopback_only=True)
    rundir.create(job)
    return job


def test_every_publication_is_seen_at_once_on_another_client(cachefs, tmp_path):
    job = new_run_dir(cachefs, "command: x\n", tmp_path)
    run_dir = job.run.run_dir
    before = json.loads(python_on(cachefs, 2, READER.format(root=str(ROOT), run_dir=run_dir)))
    assert before == {"scheduler": None, "abort": None, "digest": None, "worker": "PENDING"}
    # the control: client 2 caches a name it looked up while it was missing ...
    probe = f"{run_dir}/probe.json"
    python_on(cachefs, 2, f"import os; print(os.path.exists({probe!r}))")
    python_on(cachefs, 1, f"open({probe!r}, 'w').write('{{}}')")
    python_on(cachefs, 1, WRITER.format(root=str(ROOT), run_dir=run_dir, reason="boom"))
    after = json.loads(python_on(cachefs, 2, READER.format(root=str(ROOT), run_dir=run_dir)))
    # ... and still misses it, while every rendezvous record is fresh
    assert python_on(cachefs, 2, f"import os; print(os.path.exists({probe!r}))") == "False"
    assert after["scheduler"]["port"] == 9123 and after["scheduler"]["listening"] is True
    assert (after["abort"], after["digest"], after["worker"]) == ("boom", 7, "RUNNING")


def test_the_first_abort_wins_across_clients(cachefs, tmp_path):
    job = new_run_dir(cachefs, "command: x\n", tmp_path)
    run_dir = job.run.run_dir
    for client in (1, 2, 3):  # every client has looked at the abort record before
        python_on(cachefs, client, READER.format(root=str(ROOT), run_dir=run_dir))
    writers = [on_client(cachefs, client,
                         [sys.executable, "-c", WRITER.format(root=str(ROOT), run_dir=run_dir,
                                                              reason=f"from {client}")],
                         stdout=subprocess.PIPE) for client in (1, 2, 3)]
    wins = [w.communicate(timeout=60)[0].strip() for w in writers]
    assert sorted(wins) == ["False", "False", "True"]
    winner = f"from {1 + wins.index('True')}"
    seen = {json.loads(python_on(cachefs, c, READER.format(root=str(ROOT),
                                                             run_dir=run_dir)))["abort"]
            for c in (1, 2, 3)}
    assert seen == {winner}


def start_tasks(cachefs, job: planning.JobPlan, placement: Dict[int, int], env=None):
    """One agent per task, task i on client placement[i] (like array tasks of a batch
    system on different nodes)."""
    layout = RunLayout(job.run.run_dir)
    return {i: on_client(cachefs, client, [sys.executable, layout.runtime, "run",
                                           layout.root, "--task", str(i)],
                         extra_env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i, client in placement.items()}


def example_text(tmp_path: Path, monkeypatch) -> str:
    """The example job (its roles run ``python3``: this venv's, as the CLI would see)."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep
                       + os.environ["PATH"])
    example = copy_example(tmp_path / "example")
    text = example.read_text().replace("workdir: .", f"workdir: {example.parent}")
    return text[:text.index("rendezvous:")]  # new_run_dir adds its own


@pytest.mark.mxnet
def test_example_job_trains_with_tasks_on_three_clients(cachefs, tmp_path, monkeypatch):
    job = new_run_dir(cachefs, example_text(tmp_path, monkeypatch), tmp_path)
    # scheduler on client 1, servers on 2 and 3, workers on 3 and 2
    agents = start_tasks(cachefs, job, {0: 1, 1: 2, 2: 3, 3: 3, 4: 2},
                         env={"EPOCHS": "2"})
    codes = {i: proc.wait(timeout=300) for i, proc in agents.items()}
    layout = RunLayout(job.run.run_dir)
    output = "".join(Path(layout.task_log("worker", r)).read_text() for r in (0, 1))
    assert codes == {i: 0 for i in agents}, output[-3000:]
    assert_trained(output)


@pytest.mark.mxnet
def test_a_crash_on_one_client_stops_the_tasks_on_the_others(cachefs, tmp_path,
                                                              monkeypatch):
    job = new_run_dir(cachefs, example_text(tmp_path, monkeypatch), tmp_path)
    env = {"CRASH_RANK": "1", "CRASH_AFTER_STEPS": "20", "STEP_SLEEP": "0.02", "EPOCHS": "50"}
    agents = start_tasks(cachefs, job, {0: 1, 1: 2, 2: 3, 3: 3, 4: 2}, env=env)
    codes = {i: proc.wait(timeout=300) for i, proc in agents.items()}
    layout = RunLayout(job.run.run_dir)
    abort = json.loads(Path(layout.abort).read_text())
    assert "exited with code 1" in abort["reason"], abort
    assert set(codes.values()) == {1}
    ended = [json.loads(Path(layout.task_record(t.role.value, t.rank)).read_text())["ended_at"]
             for t in job.run.tasks]
    assert max(ended) - abort["at"] < 5 + 5  # grace 5 s, the abort read once a second
    assert time.time() - abort["at"] < 300
