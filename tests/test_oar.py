"""The OAR backend: its dialect without a cluster (job scripts, quoting, oarsub's answer,
oarstat's states, the rank a task reads from OAR_ARRAY_INDEX), then on the real OAR
test cluster (ci/clusters/oar-up.sh: OAR's sshd in each namespace test host, so tasks
run on distinct IPs): the example MXNet job, and a relaunch after a failed attempt with
stand-in roles (tests/fakerole.py). The crash and cancel: tests/test_batch.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from mxbatch.backends.batch import oar as oar_backend
from mxbatch.backends.batch.jobscript import Unrepresentable, parse_job_id
from mxbatch.backends.status import NativeState
from mxbatch.runtime.planfile import RunPlan, TaskInfo
from mxbatch.runtime.roles import Role
from mxbatch.runtime.task import resolve

from .clusterjobs import example_spec, fake_spec, oar_queued, run_dir_of, wait_queue_empty
from .conftest import FAKEROLE, Cli, assert_no_processes, cluster_environment, wait_for
from .test_mxnet_local import assert_trained

SPEC = """\
name: oar-render
command: python3 -c pass
resources: {cpus: 2, walltime: 10m}
roles:
  server: {count: 1}
  worker: {count: 3}
restarts: {max: 1}
backends:
  oar: {queue: default, properties: "host != 'x'", extra: [-t, idempotent]}
"""


def test_job_scripts_carry_the_directives_and_the_rank_variable(cli, tmp_path):
    spec = tmp_path / "oar.yaml"
    spec.write_text(SPEC)
    result = cli.run("render", "-b", "oar", str(spec))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    worker = text[text.index("jobs/worker.sh\n#!/bin/sh"):]
    worker = worker[:worker.index("\n## ")]
    for line in ("#OAR --array 3", "#OAR -l /nodes=1/core=2,walltime=0:10:00",
                 "#OAR -q default", "#OAR -p host != 'x'", "#OAR -t idempotent",
                 "#OAR --checkpoint 120", "#OAR --signal 10"):
        assert line + "\n" in worker, (line, worker)
    assert re.search(r"^#OAR -O \S+/logs/oar-worker\.%jobid%\.out$", worker, re.MULTILINE)
    assert re.search(r"^#OAR -E \S+/logs/oar-worker\.%jobid%\.err$", worker, re.MULTILINE)
    assert re.search(r"^exec .* --role worker --task-from OAR_ARRAY_INDEX --array-base 1 "
                     r"--environ-file \S+/jobs/environ\.json$", worker, re.MULTILINE)
    assert re.search(r"^oarsub -S \S+/jobs/worker\.sh$", text, re.MULTILINE)


def test_a_run_directory_oarsub_cannot_run_is_a_spec_error(cli, tmp_path):
    spec = tmp_path / "oar.yaml"
    spec.write_text(SPEC + f"rendezvous: {{dir: '{tmp_path}/a b'}}\n")
    result = cli.run("render", "-b", "oar", str(spec))
    assert result.returncode == 2
    assert "is not one shell word" in result.stderr and "rendezvous.dir" in result.stderr


@pytest.mark.parametrize("token", ["a\nb", " lead", "trail "])
def test_directive_values_oar_cannot_carry(token):
    with pytest.raises(Unrepresentable):
        oar_backend.script_token(token)


def test_oarsubs_answer_and_oarstats_states():
    answer = ("[ADMISSION RULE] Modify resource description with type constraints\n"
              "OAR_JOB_ID=41\nOAR_JOB_ID=42\nOAR_ARRAY_ID=41")
    assert parse_job_id(oar_backend.OARSUB_JOB_ID, answer, ["oarsub"]) == "41"
    listing = json.dumps({
        "41": {"array_id": 41, "array_index": 1, "state": "Running", "Job_Id": 41},
        "42": {"array_id": 41, "array_index": 2, "state": "Terminated", "Job_Id": 42}})
    jobs = oar_backend.parse_oarstat(listing)
    assert sorted(jobs["41"]) == [1, 2]
    assert oar_backend.NATIVE_STATES[jobs["41"][1]["state"]] is NativeState.ACTIVE
    assert oar_backend.NATIVE_STATES[jobs["41"][2]["state"]] is NativeState.GONE
    assert oar_backend.NATIVE_STATES["Waiting"] is NativeState.QUEUED
    assert oar_backend.parse_oarstat("") == {}


def test_the_runtime_reads_a_role_rank_from_the_named_variable():
    tasks = [TaskInfo(index=i, role=r, rank=k, argv=["true"], env={}) for i, (r, k) in
             enumerate([(Role.SCHEDULER, 0), (Role.WORKER, 0), (Role.WORKER, 1)])]
    plan = RunPlan(job_id="j", run_dir="/tmp/j", workdir="/tmp", python="python3",
                   created_at=0.0, tasks=tasks)
    task = resolve(plan, {"OAR_ARRAY_INDEX": "2"}, role="worker",
                   index_variable="OAR_ARRAY_INDEX", array_base=1)
    assert (task.role, task.rank) == (Role.WORKER, 1)


# ------------------------------------------------------------------ the OAR test cluster


def oar_nodes_used(cli: Cli, job: str) -> set:
    """The nodes (addresses) OAR gave the job's tasks."""
    out = subprocess.run(["oarstat", "-f", "-J", "--sql", f"job_name LIKE '{job}-%'"],
                         capture_output=True, text=True, env=cli.env, check=True).stdout
    return {a for j in json.loads(out).values() for a in j["assigned_network_address"]}


@pytest.mark.oar
@pytest.mark.mxnet
def test_example_job_trains_on_oar_across_nodes(oar, tmp_path):
    spec = example_spec(tmp_path, "oar", "", name="oar-mlp", memory="1G")
    result = oar.run("submit", "--backend", "oar", "--wait", str(spec), env={"EPOCHS": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    assert oar.status(job)["state"] == "SUCCEEDED"
    nodes = oar_nodes_used(oar, job)
    # 5 tasks of a core each, 4 cores a node: at least 2 nodes, each its own address
    assert len(nodes) >= 2 and nodes <= set(cluster_environment("oar")["MXBATCH_OAR_NODES"]
                                            .split()), nodes
    wait_queue_empty(lambda: oar_queued(oar, job), job, 30)
    assert_no_processes(job)


@pytest.mark.oar
def test_a_failed_attempt_relaunches_on_oar_and_succeeds(oar, tmp_path):
    """worker[0] exits 3 in attempt 0 after it reached the scheduler: the driver submits
    attempt 1 (new OAR arrays, told their attempt by the job scripts' arguments), which
    succeeds; nothing of either attempt is left queued or running."""
    spec = fake_spec(tmp_path, "oar", "", name="oar-restart",
                     env={"FAKE_SLEEP": "4", "FAKE_EXIT": "3", "FAKE_EXIT_ATTEMPTS": "0",
                          "FAKE_EXIT_RANKS": "0"})
    data = json.loads(spec.read_text())
    data["restarts"] = {"max": 1, "backoff": 0}
    spec.write_text(json.dumps(data))
    result = oar.run("submit", "--backend", "oar", "--wait", str(spec), timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    job = result.stdout.split()[0]
    status = oar.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"], status
    first, later = (a["native"]["job_ids"] for a in status["attempts"])
    assert set(first.values()).isdisjoint(later.values())
    env = json.loads((tmp_path / "out" / "0.json").read_text())["env"]  # attempt 1's dump
    assert env["MXBATCH_ATTEMPT"] == "1" and env["MXBATCH_RESTART_REASON"] == "failure"
    run = run_dir_of(oar, job)
    assert "exited with code 3" in (run / "logs" / "worker-0.log").read_text()
    assert list(Path(run, "attempts", "1", "logs").glob("oar-worker.*.out"))
    wait_queue_empty(lambda: oar_queued(oar, job), job, 30)
    assert_no_processes(job, timeout=30)


@pytest.mark.oar
def test_launch_inside_an_oar_job_reaches_its_nodes_with_oarsh(oar, tmp_path):
    """`mxbatch launch --launcher ssh` in an OAR job of 2 nodes, given no hosts: the hosts
    of OAR_NODEFILE, reached with oarsh (plain ssh has no key for them), a task on each."""
    script, out = tmp_path / "job.sh", tmp_path / "out"
    out.mkdir()
    script.write_text(
        f"#!/bin/sh\n#OAR -l /nodes=2/core=2,walltime=0:05:00\n#OAR -n oar-inside\n"
        f"#OAR -d {tmp_path}\n#OAR -O {tmp_path}/job.out\n#OAR -E {tmp_path}/job.err\n"
        f"export PATH={Path(oar.env['PATH'].split(':')[0])}:$PATH MXBATCH_HOME={oar.home}\n"
        f"export FAKE_SLEEP=2 FAKE_OUT={out}\n"
        f"exec mxbatch launch --launcher ssh -n 2 -s 1 --grace 2s --name inside -- "
        f"python3 {FAKEROLE}\n")
    script.chmod(0o755)
    answer = subprocess.run(["oarsub", "-S", str(script)], capture_output=True, text=True,
                            env=oar.env, check=True).stdout
    oar_job = parse_job_id(oar_backend.OARSUB_JOB_ID, answer, ["oarsub"])

    def ended() -> dict:
        listing = subprocess.run(["oarstat", "-f", "-J", "-j", oar_job], capture_output=True,
                                 text=True, env=oar.env, check=True).stdout
        job = json.loads(listing)[oar_job]
        return job if job["state"] in ("Terminated", "Error") else {}

    job = wait_for(ended, 180, f"OAR job {oar_job} to end")
    log = (tmp_path / "job.err").read_text()
    assert job["state"] == "Terminated" and job["exit_code"] == 0, log[-3000:]
    run = next((oar.home / "runs").glob("inside-*"))
    hosts = {json.loads(p.read_text())["host"] for p in (run / "tasks").glob("*.json")}
    names = set(cluster_environment("oar")["MXBATCH_OAR_NODE_NAMES"].split())
    assert len(hosts) == 2 and hosts <= names, hosts
    controller = json.loads((run / "ssh" / "controller.json").read_text())
    assert {h["ssh"][0] for h in controller["hosts"]} == {"oarsh"}, controller["hosts"]
    assert_no_processes(run.name, timeout=30)
