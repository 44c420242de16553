"""plan.make: task order, environment, identity from array variables."""

from mxbatch.runtime import task as task_identity
from mxbatch.runtime.environ import role_environment
from mxbatch.runtime.planfile import RunPlan
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

SPEC = """\
name: p
command: python3 t.py
env: {SHARED: s}
resources: {cpus: 3}
roles:
  server: {count: 2}
  worker: {count: 3, env: {OMP_NUM_THREADS: "1"}}
network: {interface: lo}
"""


def make(tmp_path):
    spec = specs.parse(SPEC, tmp_path / "p.yaml")
    return planning.make(spec, "local", job_id="p-0000abcd", created_at=100.0, python="/py")


def test_task_order_and_ranks(tmp_path):
    plan = make(tmp_path)
    assert [(t.index, t.label) for t in plan.run.tasks] == [
        (0, "scheduler[0]"), (1, "server[0]"), (2, "server[1]"),
        (3, "worker[0]"), (4, "worker[1]"), (5, "worker[2]")]
    assert plan.run.run_dir.endswith("/p-0000abcd")
    assert plan.run.startup_deadline == 100.0 + 600.0


def test_task_environment(tmp_path):
    plan = make(tmp_path)
    worker = plan.run.task_for("worker", 2)
    assert worker.env["DMLC_ROLE"] == "worker"
    assert worker.env["DMLC_NUM_SERVER"] == "2"
    assert worker.env["DMLC_NUM_WORKER"] == "3"
    assert worker.env["DMLC_INTERFACE"] == "lo"
    assert worker.env["MXBATCH_JOB_ID"] == "p-0000abcd"
    assert worker.env["MXBATCH_RANK"] == "2"
    assert worker.env["SHARED"] == "s"
    assert worker.env["OMP_NUM_THREADS"] == "1"  # the spec wins
    assert plan.run.task_for("server", 0).env["OMP_NUM_THREADS"] == "3"  # from cpus
    assert "PORT" not in worker.env


def test_plan_json_round_trip(tmp_path):
    plan = make(tmp_path)
    assert RunPlan.from_json(plan.run.to_json()) == plan.run


def test_task_identity_from_array_variables(tmp_path):
    run = make(tmp_path).run
    assert task_identity.resolve(run, {"SGE_TASK_ID": "2"}, role="worker").label == "worker[1]"
    assert task_identity.resolve(run, {"SLURM_ARRAY_TASK_ID": "1"},
                                 role="server").label == "server[1]"
    assert task_identity.resolve(run, {"MXBATCH_TASK": "3"}).label == "worker[0]"
    assert task_identity.resolve(run, {}, role="scheduler").label == "scheduler[0]"


def test_role_environment_inherits_and_filters():
    inherited = {"PATH": "/bin", "SECRET": "x", "PORT": "80", "DMLC_ROLE": "stale",
                 "PYTHONPATH": "/old", "SLURM_JOB_ID": "7"}
    env = role_environment(inherited, True, {"DMLC_ROLE": "worker"}, {"DMLC_PS_ROOT_PORT": "1"},
                           "/hook")
    assert env["SECRET"] == "x" and "PORT" not in env and env["DMLC_ROLE"] == "worker"
    assert env["PYTHONPATH"] == "/hook:/old"
    env = role_environment(inherited, False, {}, {}, None)
    assert "SECRET" not in env and env["PATH"] == "/bin" and env["SLURM_JOB_ID"] == "7"
