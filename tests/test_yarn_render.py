"""YARN without a cluster: the skein specification (golden), the container environment
(inherited variables, YARN's Docker runtime), the shipped Python environment
(``python_env``: golden script, archive checks, ``auto``'s cache key and packing), the
key-value rendezvous on a stand-in store, reading NodeManager log answers and abort
diagnostics, status rules."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mxbatch.backends.registry import options_for
from mxbatch.backends.status import NativeState
from mxbatch.backends.yarn import appspec as yarn_spec
from mxbatch.backends.yarn import pyenv
from mxbatch.backends.yarn.app import AppReport, abort_from_report
from mxbatch.backends.yarn.backend import YarnHandle, native_states, settle
from mxbatch.backends.yarn.kv import abort_from_diagnostics, diagnostics_for
from mxbatch.backends.yarn.logs import ContainerInfo, LogFollower, unwrap
from mxbatch.backends.yarn.states import AppState, ContainerState, FinalStatus
from mxbatch.errors import SpecError
from mxbatch.jobs import submit as jobs
from mxbatch.runtime.kvrendezvous import KeyValueRendezvous, KeyValueStore
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import (
    AbortKind,
    AbortRecord,
    DigestRecord,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning
from mxbatch.spec.schema import ContainerRuntime, ContainerSpec

SCHEDULER, SERVER, WORKER = Role.SCHEDULER, Role.SERVER, Role.WORKER

SPEC = """\
name: golden
command: python3 train.py
resources: {cpus: 2, memory: 4G, walltime: 2h}
roles:
  server: {count: 1}
  worker: {count: 3, resources: {gpus: 1}}
rendezvous: {dir: /shared/runs}
container: {image: "registry.example/mxnet:1.9.1", mounts: ["/data:/data:ro", "/venv:/venv"]}
backends:
  yarn: {queue: ml, node_label: gpu, tags: [Team-A]}
"""

GOLDEN_HEAD = """\
name: golden-00000001
queue: ml
node_label: gpu
tags:
- mxbatch
- mxbatch-job-golden-00000001
- team-a
max_attempts: 1
master:
  resources:
    memory: 512
    vcores: 1
services:
"""

GOLDEN_WORKER = """\
  worker:
    instances: 3
    max_restarts: 0
    resources:
      memory: 4096
      vcores: 2
      gpus: 1
    files:
      runtime.pyz:
        source: /shared/runs/golden-00000001/runtime.pyz
        type: file
      plan.json:
        source: /shared/runs/golden-00000001/yarn/plan.json
        type: file
      mxbatch-env.sh:
        source: /shared/runs/golden-00000001/yarn/mxbatch-env.sh
        type: file
      workdir:
        source: {workdir}
        type: file
    env:
      MXBATCH_JOB_ID: golden-00000001
      YARN_CONTAINER_RUNTIME_TYPE: docker
      YARN_CONTAINER_RUNTIME_DOCKER_IMAGE: registry.example/mxnet:1.9.1
      YARN_CONTAINER_RUNTIME_DOCKER_CONTAINER_NETWORK: host
      YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS: /data:/data:ro,/venv:/venv:rw
    script: |
      # mxbatch job golden-00000001: container worker_<i> runs task 2+i (worker[i])
      set -e
      i=${{SKEIN_CONTAINER_ID##*_}}
      if [ "$i" -ge 3 ]; then
        echo "mxbatch: container $SKEIN_CONTAINER_ID: the job has only 3 worker task(s)" >&2
        exit 2
      fi
      ln -sfn "${{LOG_DIRS%%,*}}" logs
      . ./mxbatch-env.sh
      status=0
      /venv/bin/python runtime.pyz run . --task $((2 + i)) --kv-store mxbatch.backends.yarn_kv:container_store || status=$?
      if [ "$status" -gt 128 ]; then
        echo "mxbatch: the supervisor was killed by signal $((status - 128)); waiting up to 75s for the job to end" >&2
        sleep 75
      fi
      exit "$status"
"""


def golden(tmp_path: Path, text: str = SPEC):
    spec = specs.parse(text, tmp_path / "golden.yaml")
    backend = jobs.backend_for_spec(spec, "yarn")
    plan = planning.make(spec, "yarn", job_id="golden-00000001", created_at=0,
                         python="/venv/bin/python")
    return backend, plan


# ------------------------------------------------------------------ the specification


def test_skein_specification_is_golden(tmp_path):
    backend, plan = golden(tmp_path)
    text = yarn_spec.spec_yaml(yarn_spec.application_spec(plan, backend.options))
    assert text.startswith(GOLDEN_HEAD)
    assert GOLDEN_WORKER.format(workdir=tmp_path) in text
    assert list(yarn_spec.application_spec(plan, backend.options)["services"]) == [
        "scheduler", "server", "worker"]


@pytest.mark.parametrize("supervisor,code,slept", [
    ("kill -KILL $$", 137, "75"),        # killed: no final record, the peers must see it
    ("exit 3", 3, None),                 # failed by itself: its abort is written
    ("exit 0", 0, None),
], ids=["killed", "failed", "succeeded"])
def test_container_outlives_a_killed_supervisor(tmp_path, supervisor, code, slept):
    """The container script run by bash, with a stand-in supervisor and ``sleep``: a
    supervisor killed by a signal keeps its container for the peers' heartbeat timeout
    and grace (30s + 30s + 15s) so that they name the lost task; else it ends at once."""
    bin_dir, work = tmp_path / "bin", tmp_path / "container"
    bin_dir.mkdir()
    work.mkdir()
    python = bin_dir / "python"
    python.write_text(f"#!/bin/bash\n{supervisor}\n")
    (bin_dir / "sleep").write_text(f"#!/bin/bash\necho \"$@\" > {tmp_path / 'slept'}\n")
    for tool in (python, bin_dir / "sleep"):
        tool.chmod(0o755)
    (work / yarn_spec.ENV_FILE).write_text(f"export PATH={bin_dir}:$PATH\n")
    _, plan = golden(tmp_path)
    plan = planning.make(plan.spec, "yarn", job_id="golden-00000001", created_at=0,
                         python=str(python))
    script = yarn_spec.container_script(plan.run, WORKER)
    result = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "SKEIN_CONTAINER_ID": "worker_1",
                                 "LOG_DIRS": str(tmp_path)}, timeout=60)
    assert result.returncode == code, result.stderr
    if slept is None:
        assert not (tmp_path / "slept").exists()
    else:
        assert (tmp_path / "slept").read_text().split() == [slept]
        assert "the supervisor was killed by signal 9" in result.stderr


def test_specification_is_what_skein_accepts(tmp_path):
    skein = pytest.importorskip("skein")
    backend, plan = golden(tmp_path)
    data = yarn_spec.application_spec(plan, backend.options)
    spec = skein.ApplicationSpec.from_dict(data)
    assert spec.services["worker"].instances == 3
    assert spec.services["worker"].resources.gpus == 1
    assert spec.services["server"].max_restarts == 0
    assert spec.node_label == "gpu" and spec.queue == "ml"
    assert set(spec.services["scheduler"].files) == {"runtime.pyz", "plan.json",
                                                     "mxbatch-env.sh", "workdir"}


def test_containers_see_paths_relative_to_their_directory(tmp_path):
    _, plan = golden(tmp_path)
    shipped = yarn_spec.container_plan(plan.run, ship_workdir=True)
    assert (shipped.run_dir, shipped.workdir) == (".", "workdir")
    in_place = yarn_spec.container_plan(plan.run, ship_workdir=False)
    assert in_place.workdir == str(tmp_path)
    options = options_for(specs.parse(SPEC.replace("tags: [Team-A]", "ship_workdir: false"),
                                      tmp_path / "golden.yaml"), "yarn")
    assert "workdir" not in yarn_spec.application_spec(plan, options)["services"]["worker"][
        "files"]


def test_memory_defaults_when_the_spec_sets_none(tmp_path):
    backend, plan = golden(tmp_path, "command: x\nrendezvous: {dir: /r}\n")
    services = yarn_spec.application_spec(plan, backend.options)["services"]
    assert services["worker"]["resources"] == {"memory": yarn_spec.DEFAULT_MEMORY_MIB,
                                               "vcores": 1}
    assert "YARN_CONTAINER_RUNTIME_TYPE" not in services["worker"]["env"]


def test_render_through_the_cli_contacts_no_cluster(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(SPEC.replace("/shared/runs", str(tmp_path / "runs")))
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
           "JAVA_HOME": "/nonexistent", "YARN_CONF_DIR": "/nonexistent"}
    result = cli.run("render", "--backend", "yarn", str(path), env=env)
    assert result.returncode == 0, result.stderr
    assert "## skein application specification" in result.stdout
    assert "  worker:\n    instances: 3\n" in result.stdout
    assert "skein driver" not in result.stderr
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ container environment


def test_inherited_environment_leaves_out_what_yarn_sets(tmp_path):
    _, plan = golden(tmp_path)
    environ = {"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv", "EPOCHS": "3",
               "HOME": "/home/me", "PWD": "/here", "PORT": "80", "DMLC_ROLE": "worker",
               "MXBATCH_HOME": "/m", "SKEIN_CONFIG": "/s", "CONTAINER_ID": "c",
               "LOG_DIRS": "/l", "NM_HOST": "n", "BASH_FUNC_f%%": "() { :; }",
               "YARN_CONTAINER_RUNTIME_TYPE": "docker", "TMPDIR": "/tmp/me"}
    assert yarn_spec.inherited_environment(plan.run, environ) == {
        "EPOCHS": "3", "PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv"}
    closed = planning.make(specs.parse("command: x\ninherit_env: false\n",
                                       tmp_path / "j.yaml"), "yarn")
    assert yarn_spec.inherited_environment(closed.run, environ) == {"PATH": "/venv/bin:/usr/bin"}


def test_env_file_survives_any_value_through_bash(tmp_path):
    values = {"QUOTES": "it's \"x\"", "DOLLAR": "$HOME `id` $(id)", "NEWLINE": "a\nb",
              "EMPTY": "", "SPACES": "  a  b  "}
    path = tmp_path / "env.sh"
    path.write_text(yarn_spec.env_file(values))
    out = subprocess.run(["bash", "-c", f'. "{path}" && env -0'], capture_output=True,
                         check=True, env={}).stdout
    seen = dict(item.decode().split("=", 1) for item in out.split(b"\0") if b"=" in item)
    assert {k: seen[k] for k in values} == values


def test_docker_runtime_environment():
    container = ContainerSpec(
        runtime=ContainerRuntime.DOCKER, image="img:1", mounts=("/a:/a", "/b:/c:ro"),
        options=("YARN_CONTAINER_RUNTIME_DOCKER_RUN_PRIVILEGED_CONTAINER=true",))
    assert yarn_spec.docker_environment(container) == {
        "YARN_CONTAINER_RUNTIME_TYPE": "docker",
        "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": "img:1",
        "YARN_CONTAINER_RUNTIME_DOCKER_CONTAINER_NETWORK": "host",
        "YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS": "/a:/a:rw,/b:/c:ro",
        "YARN_CONTAINER_RUNTIME_DOCKER_RUN_PRIVILEGED_CONTAINER": "true"}


@pytest.mark.parametrize("container,backend,words", [
    ("{runtime: podman, image: x}", "yarn", "podman containers are not supported by backend "
                                            "'yarn'"),
    ("{image: x, mounts: ['data:/data']}", "local", "absolute host path"),
    ("{image: x, options: [--privileged]}", "yarn", "YARN_CONTAINER_RUNTIME_DOCKER_<NAME>"),
    ("{image: x, mounts: [data:/data]}", "yarn", "absolute paths only"),
    ("{image: x, mounts: [/a]}", None, "host-path:container-path"),
    ("{runtime: docker}", None, "missing: the container image"),
    ("{image: x, volumes: []}", None, "unknown key"),
], ids=["yarn-podman", "local", "yarn-option", "relative-mount", "bad-mount", "no-image",
        "unknown-key"])
def test_container_spec_errors(tmp_path, container, backend, words):
    path = tmp_path / "job.yaml"
    path.write_text(f"command: x\ncontainer: {container}\n")
    with pytest.raises(SpecError) as error:
        jobs.prepare(specs.load(path), backend or "yarn", for_submit=False)
    assert words in str(error.value) and f"{path}:2:" in str(error.value)


# ------------------------------------------------------------------ key-value rendezvous


class DictStore(KeyValueStore):
    def __init__(self) -> None:
        self.data = {}
        self.closed = None

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[key] = value

    def put_new(self, key, value):
        return self.data.setdefault(key, value) is value

    def get_prefix(self, prefix):
        return {k: v for k, v in self.data.items() if k.startswith(prefix)}

    def close(self, exit_status, abort):
        self.closed = (exit_status, abort)


def test_key_value_rendezvous_round_trips_and_first_abort_wins():
    store = DictStore()
    rdv = KeyValueRendezvous(store)
    keys = [(WORKER, 0), (WORKER, 1)]
    assert rdv.read_scheduler() is None and rdv.read_tasks(keys) == {}
    assert rdv.read_abort() is None and rdv.read_digest() is None
    rdv.publish_scheduler(SchedulerRecord(job_id="j", ip="127.0.0.1", port=9000))
    assert rdv.read_scheduler().port == 9000
    rdv.write_task(TaskRecord(role=WORKER, rank=1, state=TaskState.RUNNING, heartbeat=3))
    store.put("task/junk", b"{not json")
    assert rdv.read_tasks(keys)[(WORKER, 1)].heartbeat == 3
    assert rdv.read_task(WORKER, 1).heartbeat == 3 and rdv.read_task(WORKER, 0) is None
    rdv.publish_digest(DigestRecord(job_id="j", seq=4))
    assert rdv.read_digest().seq == 4
    first = AbortRecord(kind=AbortKind.FAILED, reason="worker[1] exited with code 1")
    assert rdv.write_abort(first) is True
    assert rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, reason="later")) is False
    assert rdv.read_abort().reason == "worker[1] exited with code 1" and first.at > 0
    rdv.close(1)
    assert store.closed[0] == 1 and b"exited with code 1" in store.closed[1]


def test_abort_travels_in_yarn_diagnostics():
    abort = AbortRecord(kind=AbortKind.FAILED, reason="worker[0] exited with code 1",
                        role=WORKER, rank=0, exit_code=1, at=5.0)
    text = "Shutdown by user: " + diagnostics_for(abort.to_dict()) + "\nmore words"
    assert abort_from_diagnostics(text) == abort.to_dict()
    assert abort_from_diagnostics("Failure in service worker, see logs") is None
    report = AppReport(state=AppState.FINISHED, final_status=FinalStatus.FAILED,
                       diagnostics=text)
    assert abort_from_report(report).exit_code == 1
    plain = abort_from_report(AppReport(AppState.FINISHED, FinalStatus.FAILED,
                                        "Failure in container allocator:\n"
                                        "Invalid resource request!"))
    assert plain.kind is AbortKind.FAILED
    assert plain.reason == "YARN application FAILED: Failure in container allocator:"
    killed = AppReport(AppState.KILLED, FinalStatus.KILLED, "")
    assert abort_from_report(killed).kind is AbortKind.CANCELLED
    assert abort_from_report(AppReport(AppState.FINISHED, FinalStatus.SUCCEEDED)) is None


def test_state_enums_mirror_skeins():
    model = pytest.importorskip("skein.model")
    for ours, theirs in ((AppState, model.ApplicationState), (FinalStatus, model.FinalStatus),
                         (ContainerState, model.ContainerState)):
        assert {m.value for m in ours} == {str(m) for m in theirs}


# ------------------------------------------------------------------ status rules


def test_native_states_follow_the_containers(tmp_path):
    _, plan = golden(tmp_path)
    containers = {(SCHEDULER, 0): ContainerState.RUNNING, (SERVER, 0): ContainerState.SUCCEEDED,
                  (WORKER, 0): ContainerState.REQUESTED}
    native = native_states(plan.run, AppState.RUNNING, containers)
    assert native[(SCHEDULER, 0)] is NativeState.ACTIVE
    assert native[(SERVER, 0)] is NativeState.GONE
    assert native[(WORKER, 0)] is NativeState.QUEUED
    assert native[(WORKER, 2)] is NativeState.QUEUED  # no container yet
    assert set(native_states(plan.run, AppState.ACCEPTED, containers).values()) == {
        NativeState.QUEUED}


def test_settle_after_the_application_ended(tmp_path):
    _, plan = golden(tmp_path)
    running = {(t.role, t.rank): TaskRecord(role=t.role, rank=t.rank, state=TaskState.RUNNING)
               for t in plan.run.tasks}
    done = settle(plan.run, running, FinalStatus.SUCCEEDED)
    assert {r.state for r in done.values()} == {TaskState.SUCCEEDED}
    assert settle(plan.run, {}, FinalStatus.SUCCEEDED)[(WORKER, 2)].state is TaskState.SUCCEEDED
    abort = AbortRecord(kind=AbortKind.FAILED, reason="worker[1] exited with code 3",
                        role=WORKER, rank=1, exit_code=3)
    failed = settle(plan.run, running, FinalStatus.FAILED, abort)
    assert failed[(WORKER, 1)].state is TaskState.FAILED
    assert failed[(WORKER, 1)].exit_code == 3
    assert failed[(WORKER, 0)].state is TaskState.CANCELLED
    assert (WORKER, 0) not in settle(plan.run, {}, FinalStatus.FAILED, abort)


# ------------------------------------------------------------------ logs


NM_ANSWER = (b"Container: container_1_0001_01_000002 on localhost:34175\n"
             b"LogAggregationType: LOCAL\n" + b"=" * 68 + b"\n"
             b"LogType:worker-0.log\nLogLastModifiedTime:Sun Nov 29 19:49:27 +0000 2026\n"
             b"LogLength:14\nLogContents:\nline 1\nline 2\n"
             b"End of LogType:worker-0.log.\n" + b"*" * 77 + b"\n\n")


def test_nodemanager_log_answer_is_unwrapped():
    assert unwrap(NM_ANSWER) == b"line 1\nline 2\n"
    assert unwrap(b"plain text") == b"plain text"
    info = ContainerInfo("container_1_0001_01_000002", "node7:8042")
    assert info.log_url("worker-0.log") == ("http://node7:8042/ws/v1/node/containerlogs/"
                                            "container_1_0001_01_000002/worker-0.log")


def test_log_follower_fetches_at_most_once_a_second(monkeypatch):
    fetched = []
    clock = [100.0]
    monkeypatch.setattr("mxbatch.backends.yarn.logs.fetch",
                        lambda container, name: fetched.append(name) or b"abcdef")
    follower = LogFollower(lambda: ContainerInfo("c", "n:1"), "worker-0.log",
                           clock=lambda: clock[0])
    assert follower(2, False) == b"cdef"
    assert follower(6, False) is None  # too soon
    assert follower(6, True) == b""    # final reads anyway
    clock[0] += 1.5
    assert follower(3, False) == b"def"
    assert len(fetched) == 3
    assert LogFollower(lambda: None, "x.log")(0, True) is None


def test_status_of_a_finished_job_needs_no_driver(home, tmp_path):
    backend, plan = golden(tmp_path, "command: x\nrendezvous: {dir: %s}\n" % (tmp_path / "r"))
    layout = RunLayout(plan.run.run_dir)
    Path(layout.backend_dir(yarn_spec.STATE_DIR)).mkdir(parents=True)
    Path(layout.plan).write_text(plan.run.to_json())
    abort = AbortRecord(kind=AbortKind.CANCELLED, reason="cancelled by the user")
    Path(layout.backend_file(yarn_spec.STATE_DIR, "report.json")).write_text(json.dumps(
        {"state": "FINISHED", "final_status": "KILLED",
         "diagnostics": diagnostics_for(abort.to_dict())}))
    from mxbatch.backends.records import JobRecord

    record = JobRecord(job_id=plan.job_id, backend="yarn", run_dir=layout.root,
                       handle=YarnHandle(app_id="application_1_0001").to_dict())
    backend._job(record).driver = lambda: pytest.fail("the driver was asked")
    status = backend.status(record)
    assert status.state.value == "CANCELLED" and status.terminal
    assert status.reason == "cancelled by the user"
    backend.cancel(record)  # idempotent, no driver either


# ------------------------------------------------------------------ shipped Python environment

#: the worker's script with python_env: the shipped environment's bin leads PATH and its
#: interpreter runs the supervisor; the rest as in GOLDEN_WORKER
GOLDEN_PYTHON_ENV_SCRIPT = GOLDEN_WORKER[GOLDEN_WORKER.index("    script: |"):].replace(
    "      . ./mxbatch-env.sh\n",
    "      . ./mxbatch-env.sh\n"
    '      export PATH="$PWD/python-env/bin:$PATH" VIRTUAL_ENV="$PWD/python-env"\n'
    "      unset PYTHONHOME\n").replace("      /venv/bin/python runtime.pyz",
                                      "      ./python-env/bin/python runtime.pyz")


def env_spec(tmp_path: Path, value: str) -> Path:
    """The golden spec with ``backends.yarn.python_env: value``, as a file."""
    path = tmp_path / "golden.yaml"
    path.write_text(SPEC.replace("tags: [Team-A]}", f"tags: [Team-A], python_env: {value}}}"))
    return path


def env_plan(tmp_path: Path, value: str):
    spec = specs.load(env_spec(tmp_path, value))
    backend = jobs.backend_for_spec(spec, "yarn")
    plan = planning.make(spec, "yarn", job_id="golden-00000001", created_at=0,
                         python="/venv/bin/python")
    return backend, plan


def fake_venv(root: Path, *dists: str) -> Path:
    """A directory that looks like a virtualenv with ``dists`` installed (no files)."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for dist in dists:
        (site / f"{dist}.dist-info").mkdir()
    return root


def test_python_env_archive_is_shipped_and_its_interpreter_runs(tmp_path):
    (tmp_path / "env.tar.gz").write_bytes(b"")
    backend, plan = env_plan(tmp_path, "env.tar.gz")
    backend.check(plan)
    request = backend.render(plan, environ={"PATH": "/venv/bin:/usr/bin"})
    text = yarn_spec.spec_yaml(request.application)
    assert ("      python-env:\n        source: %s\n        type: archive\n"
            % (tmp_path / "env.tar.gz")) in text
    assert GOLDEN_PYTHON_ENV_SCRIPT.format() in text
    assert "/venv/bin/python" not in text  # the submitter's interpreter is not used
    shipped = json.loads(request.container_plan)
    assert shipped["python"] == "./python-env/bin/python"
    assert shipped["submit_path"] is None  # the roles keep the script's PATH
    assert request.native_data()["python_env"] == {
        "archive": str(tmp_path / "env.tar.gz"), "auto": False, "prefix": None,
        "packer": None, "interpreter": "./python-env/bin/python"}


def test_without_python_env_nothing_changes(tmp_path):
    backend, plan = golden(tmp_path)
    request = backend.render(plan, environ={"PATH": "/usr/bin"})
    assert "python-env" not in yarn_spec.spec_yaml(request.application)
    assert json.loads(request.container_plan)["python"] == "/venv/bin/python"
    assert request.python_env is None and request.native_data()["python_env"] is None


def test_skein_accepts_the_archive_file(tmp_path):
    skein = pytest.importorskip("skein")
    (tmp_path / "env.tar.gz").write_bytes(b"")
    backend, plan = env_plan(tmp_path, "env.tar.gz")
    spec = skein.ApplicationSpec.from_dict(backend.render(plan).application)
    shipped = spec.services["worker"].files["python-env"]
    assert str(shipped.type).lower() == "archive"
    assert shipped.source.endswith("env.tar.gz")


def test_render_through_the_cli_shows_archive_and_interpreter(cli, tmp_path):
    (tmp_path / "env.tar.gz").write_bytes(b"")
    path = env_spec(tmp_path, "env.tar.gz")
    path.write_text(path.read_text().replace("/shared/runs", str(tmp_path / "runs")))
    result = cli.run("render", "--backend", "yarn", str(path))
    assert result.returncode == 0, result.stderr
    assert "## python-env/ in every container (backends.yarn.python_env)\n" \
           f"archive {tmp_path / 'env.tar.gz'}\n" in result.stdout
    assert "the runtime and the roles run ./python-env/bin/python" in result.stdout
    assert "./python-env/bin/python runtime.pyz run ." in result.stdout
    data = json.loads(cli.run("render", "--json", "--backend", "yarn", str(path)).stdout)
    assert data["native"]["python_env"]["interpreter"] == "./python-env/bin/python"


@pytest.mark.parametrize("value,words", [
    ("missing.tar.gz", "no such archive: {tmp}/missing.tar.gz"),
    ("envdir", "{tmp}/envdir is a directory, not an archive"),
    ("env.whl", "YARN unpacks .tar.gz, .tgz, .tar, .zip archives, not env.whl"),
], ids=["missing", "directory", "not-an-archive"])
def test_unusable_archive_is_a_spec_error_at_its_key(cli, tmp_path, value, words):
    (tmp_path / "envdir").mkdir()
    (tmp_path / "env.whl").write_bytes(b"")
    path = env_spec(tmp_path, value)
    with pytest.raises(SpecError) as error:
        jobs.prepare(specs.load(path), "yarn", for_submit=False)
    assert f"{path}:10: backends.yarn.python_env: " in str(error.value)
    assert words.format(tmp=tmp_path) in str(error.value)
    # the CLI: exit 2, nothing created, no traceback
    result = cli.run("submit", "--backend", "yarn", str(path))
    assert result.returncode == 2, result.stderr
    assert words.format(tmp=tmp_path) in result.stderr and "Traceback" not in result.stderr
    assert not (cli.home / "runs").exists() or not list((cli.home / "runs").iterdir())


def test_archive_path_is_relative_to_the_spec_file(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "e.tgz").write_bytes(b"")
    assert pyenv.resolve("envs/e.tgz", tmp_path).archive == str(tmp_path / "envs" / "e.tgz")
    assert not pyenv.resolve("envs/e.tgz", tmp_path).auto


def test_auto_names_its_archive_by_what_is_installed(tmp_path):
    venv = fake_venv(tmp_path / "venv", "mxnet-1.9.1", "skein-0.8.2")
    cache = tmp_path / "cache"
    first = pyenv.resolve("auto", tmp_path, prefix=venv, cache=cache)
    assert first.auto and first.packer is pyenv.Packer.VENV_PACK
    assert first.prefix == str(venv)
    assert Path(first.archive).parent == cache and first.archive.endswith(".tar.gz")
    assert Path(first.archive).name.startswith("venv-pack-")
    assert pyenv.resolve("auto", tmp_path, prefix=venv, cache=cache) == first  # stable
    (venv / "lib" / "python3.11" / "site-packages" / "numpy-1.23.5.dist-info").mkdir()
    assert pyenv.resolve("auto", tmp_path, prefix=venv, cache=cache).archive != first.archive
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    assert pyenv.resolve("auto", tmp_path, prefix=conda, cache=cache).packer \
        is pyenv.Packer.CONDA_PACK


def test_auto_outside_any_environment_is_a_spec_error(tmp_path):
    with pytest.raises(pyenv.PythonEnvError) as error:
        pyenv.resolve("auto", tmp_path, prefix=tmp_path, cache=tmp_path / "cache")
    assert "auto packs a virtualenv or a conda environment" in error.value.problem


def test_render_of_auto_says_whether_it_is_cached(tmp_path):
    venv = fake_venv(tmp_path / "venv", "mxnet-1.9.1")
    env = pyenv.resolve("auto", tmp_path, prefix=venv, cache=tmp_path / "cache")
    assert f"auto: {venv} packed into {env.archive} (not cached yet: packed by venv-pack " \
           "at submission, then reused)" in env.describe()
    Path(env.archive).parent.mkdir()
    Path(env.archive).write_bytes(b"")
    assert "(cached: reused)" in env.describe()
    assert "every node needs the base Python in /usr/bin" in env.describe()


def test_editable_installs_are_named(tmp_path):
    venv = fake_venv(tmp_path / "venv", "mxbatch-0.1.0", "mxnet-1.9.1")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "mxbatch-0.1.0.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
    (site / "mxnet-1.9.1.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": "file:///w.whl", "archive_info": {}}))
    assert pyenv.editable(venv) == ["mxbatch"]


def test_auto_packs_once_then_reuses(tmp_path):
    """A real (small) virtualenv packed by the real venv-pack, then found in the cache."""
    pytest.importorskip("venv_pack")
    venv = tmp_path / "small"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    env = pyenv.resolve("auto", tmp_path, prefix=venv, cache=tmp_path / "cache")
    said = io.StringIO()
    assert pyenv.ensure_packed(env, said) is True
    assert f"packing the Python environment {venv} with venv-pack" in said.getvalue()
    archive = Path(env.archive)
    packed = archive.stat()
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no partial left
    with tarfile.open(archive) as tar:
        assert {"bin/python", "pyvenv.cfg"} <= set(tar.getnames())
    again = io.StringIO()
    assert pyenv.ensure_packed(pyenv.resolve("auto", tmp_path, prefix=venv,
                                             cache=tmp_path / "cache"), again) is False
    assert f"reusing the packed Python environment {archive}" in again.getvalue()
    assert archive.stat().st_mtime_ns == packed.st_mtime_ns
