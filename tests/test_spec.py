"""The job spec: defaults, overrides, and the bad-input table (exit 2, nothing created)."""

from __future__ import annotations

import json
import resource
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxbatch.backends.local import LocalOptions
from mxbatch.backends.registry import options_for
from mxbatch.errors import SpecError
from mxbatch.runtime.roles import Role
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning
from mxbatch.spec import schema

from .conftest import FAKEROLE, assert_no_processes, processes_of_jobs_named, wait_for

GOOD = """\
name: demo
command: python3 train.py --kvstore dist_sync
env: {A: 1, B: "two"}
resources: {cpus: 2, memory: 2G, walltime: 1h30m}
roles:
  server: {count: 3}
  worker:
    count: 4
    resources: {cpus: 4, gpus: 1}
    env: {W: yes}
network: {interface: lo, ports: 9100-9200}
rendezvous: {dir: runs, startup_timeout: 20s, grace: 5s}
backends:
  local: {slots: 3}
"""


def test_good_spec_parses_with_defaults_and_overrides(tmp_path):
    spec = specs.parse(GOOD, tmp_path / "demo.yaml")
    assert spec.name == "demo"
    assert spec.role(Role.WORKER).count == 4
    assert spec.role(Role.SERVER).count == 3
    assert spec.role(Role.SCHEDULER).count == 1
    assert spec.role(Role.WORKER).command == ("python3", "train.py", "--kvstore", "dist_sync")
    assert spec.role(Role.WORKER).resources == schema.Resources(cpus=4, memory_mib=2048, gpus=1,
                                                               walltime_s=5400)
    assert spec.role(Role.SERVER).resources.cpus == 2
    assert spec.env == {"A": "1", "B": "two"}
    assert spec.role(Role.WORKER).env == {"W": "true"}
    assert spec.network == schema.NetworkSpec(interface="lo", port_low=9100, port_high=9200)
    assert spec.rendezvous.dir == (tmp_path / "runs").resolve()
    assert spec.rendezvous.startup_timeout_s == 20
    assert spec.workdir == tmp_path.resolve()
    assert options_for(spec, "local") == LocalOptions(slots=3)


def test_minimal_spec_defaults(tmp_path, home):
    spec = specs.parse("command: [python3, t.py]\n", tmp_path / "my job.yaml")
    assert spec.name == "my-job"
    assert spec.role(Role.WORKER).count == 1
    assert spec.role(Role.SERVER).count == 1
    assert spec.inherit_env is True
    assert spec.rendezvous.dir == home / "runs"


def test_exit_timeout_is_a_duration_or_null_and_reaches_the_plan(tmp_path, cli):
    parse = lambda text: specs.parse("command: x\n" + text, tmp_path / "j.yaml")  # noqa: E731
    assert parse("").rendezvous.exit_timeout_s == 60
    assert parse("rendezvous: {exit_timeout: 2m}\n").rendezvous.exit_timeout_s == 120
    assert parse("rendezvous: {exit_timeout: null}\n").rendezvous.exit_timeout_s is None
    with pytest.raises(SpecError, match=r"rendezvous\.exit_timeout"):
        parse("rendezvous:\n  exit_timeout: soon\n")
    assert planning.make(parse("rendezvous: {exit_timeout: 2m}\n"), "local").run \
        .exit_timeout_s == 120
    for flag, expected in (("90s", "90s"), ("off", None)):
        result = cli.run("launch", "--render", "yaml", "--exit-timeout", flag, "--",
                         "python3", "t.py", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert yaml.safe_load(result.stdout)["rendezvous"]["exit_timeout"] == expected


def test_server_count_defaults_to_worker_count(tmp_path):
    spec = specs.parse("command: x\nroles: {worker: {count: 3}}\n", tmp_path / "j.yaml")
    assert spec.role(Role.SERVER).count == 3


def test_count_overrides(tmp_path):
    spec = specs.parse("command: x\n", tmp_path / "j.yaml")
    spec = specs.with_counts(spec, workers=5, servers=2)
    assert (spec.role(Role.WORKER).count, spec.role(Role.SERVER).count) == (5, 2)
    with pytest.raises(SpecError, match="-n/--workers"):
        specs.with_counts(spec, workers=0)


# (spec text, line, key, words the message must contain)
BAD_SPECS = [
    ("malformed", "name: demo\ncommand: [python3\n", 3, None, "malformed YAML"),
    ("unknown key", "name: demo\ncomand: python3 t.py\n", 2, "comand", "did you mean 'command'"),
    ("nested typo", "command: x\nroles:\n  worker:\n    cuont: 2\n", 4, "roles.worker.cuont",
     "did you mean 'count'"),
    ("wrong type", "command: x\nroles:\n  worker: {count: two}\n", 3, "roles.worker.count",
     "whole number"),
    ("zero workers", "command: x\nroles:\n  worker:\n    count: 0\n", 4, "roles.worker.count",
     "at least 1"),
    ("negative servers", "command: x\nroles: {server: {count: -2}}\n", 2, "roles.server.count",
     "at least 1"),
    ("missing command", "name: demo\nroles: {worker: {count: 2}}\n", None, "command", "missing"),
    ("empty command", "name: demo\ncommand: []\n", 2, "command", "empty"),
    ("nonexistent workdir", "command: x\nworkdir: no/such/dir\n", 2, "workdir",
     "no such directory"),
    ("bad duration", "command: x\nrendezvous:\n  startup_timeout: 10 parsecs\n", 3,
     "rendezvous.startup_timeout", "duration"),
    ("bad port range", "command: x\nnetwork:\n  ports: 9999-9000\n", 3, "network.ports",
     "port range"),
    ("privileged ports", "command: x\nnetwork: {ports: 80-90}\n", 2, "network.ports",
     "1024-65535"),
    ("unknown backend", "command: x\nbackends:\n  sgee: {queue: all.q}\n", 3, "backends.sgee",
     "did you mean 'sge'"),
    ("bad memory", "command: x\nresources: {memory: lots}\n", 2, "resources.memory", "size"),
    ("two schedulers", "command: x\nroles:\n  scheduler: {count: 2}\n", 3,
     "roles.scheduler.count", "exactly 1"),
    ("roles not a mapping", "command: x\nroles: [worker]\n", 2, "roles", "mapping"),
    ("bad env name", "command: x\nenv: {1BAD: x}\n", 2, "env", "not a valid"),
    ("unknown backend option", "command: x\nbackends:\n  local: {slot: 2}\n", 3,
     "backends.local.slot", "did you mean 'slots'"),
    ("container gpus", "command: x\ncontainer: {image: foo, gpus: many}\n", 2,
     "container.gpus", "expected one of auto, none, all"),
    ("bad sge submitter", "command: x\nbackends:\n  sge:\n    submitter: qsubb\n", 4,
     "backends.sge.submitter", "expected one of auto, drmaa, qsub"),
    ("bad slurm submitter", "command: x\nbackends:\n  slurm: {submitter: srun}\n", 3,
     "backends.slurm.submitter", "expected one of auto, drmaa, sbatch"),
    ("bad slurm gpu flag", "command: x\nbackends:\n  slurm: {gpu_flag: gpu}\n", 3,
     "backends.slurm.gpu_flag", "expected one of gres, gpus"),
    ("bad yarn timeout", "command: x\nbackends:\n  yarn: {connect_timeout: soon}\n", 3,
     "backends.yarn.connect_timeout", "duration"),
    ("infinite walltime", "command: x\nresources: {walltime: .inf}\n", 2, "resources.walltime",
     "finite"),
    ("nan walltime", "command: x\nroles:\n  worker: {resources: {walltime: .nan}}\n", 3,
     "roles.worker.resources.walltime", "finite"),
    ("infinite memory", "command: x\nresources: {memory: .inf}\n", 2, "resources.memory",
     "finite"),
    ("nan startup timeout", "command: x\nrendezvous: {startup_timeout: .nan}\n", 2,
     "rendezvous.startup_timeout", "finite"),
]


@pytest.mark.parametrize("text,line,key,words", [c[1:] for c in BAD_SPECS],
                         ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_exits_2_and_names_file_line_key(cli, tmp_path, text, line, key, words):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    result = cli.run("submit", str(path))
    assert result.returncode == 2, result.stderr
    message = result.stderr
    assert str(path) in message
    if line is not None:
        assert f"{path}:{line}:" in message
    if key is not None:
        assert f" {key}:" in message
    assert words in message
    assert result.stdout == ""
    assert cli.run_dirs() == []
    assert not (cli.home / "jobs").exists() or list((cli.home / "jobs").iterdir()) == []


def test_unknown_interface_exits_2(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\nnetwork:\n  interface: nosuch0\n")
    result = cli.run("submit", str(path))
    assert result.returncode == 2
    assert f"{path}:3: network.interface: no network interface 'nosuch0'" in result.stderr
    assert cli.run_dirs() == []


def test_rendezvous_dir_not_writable_exits_2(cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = tmp_path / "job.yaml"
    path.write_text(f"command: x\nrendezvous:\n  dir: {blocker}/runs\n")
    result = cli.run("submit", str(path))
    assert result.returncode == 2
    assert f"{path}:3: rendezvous.dir: cannot create run directories" in result.stderr
    assert not (cli.home / "runs").exists()


def test_unknown_backend_flag_exits_2(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\n")
    result = cli.run("submit", str(path), "--backend", "nosuch")
    assert result.returncode == 2
    assert "unknown backend 'nosuch'" in result.stderr and "local" in result.stderr
    assert cli.run_dirs() == []


def test_missing_spec_file_exits_2(cli, tmp_path):
    result = cli.run("submit", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr and "cannot read" in result.stderr


def test_bad_worker_flag_exits_2(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\n")
    result = cli.run("submit", str(path), "-n", "0")
    assert result.returncode == 2
    assert "-n/--workers" in result.stderr
    assert cli.run_dirs() == []


def _in_512_mib(cli, *args: str, cwd=None) -> subprocess.CompletedProcess:
    """The CLI with at most 512 MiB of address space: a command whose cost grows with a
    count it was given fails (MemoryError, abort) instead of eating the machine."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
    return subprocess.run([sys.executable, "-m", "mxbatch", *args], capture_output=True,
                          text=True, timeout=120, env=cli.env, cwd=cwd, preexec_fn=limit)


@pytest.mark.parametrize("args, flag", [
    (["render", "-n", "99999999999"], "-n/--workers"),
    (["render", "--format", "shell", "-s", "99999999999"], "-s/--servers"),
    (["submit", "-n", "99999999999"], "-n/--workers"),
])
def test_a_huge_count_flag_is_a_spec_error_at_once(cli, tmp_path, args, flag):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\n")
    result = _in_512_mib(cli, *args, str(path))
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"<command line>: {flag}: " in result.stderr
    assert "the local backend's ceiling of 1000 tasks" in result.stderr
    assert "set max_tasks: " in result.stderr and "Traceback" not in result.stderr
    assert cli.run_dirs() == [] and not (cli.home / "jobs").exists()


def test_launch_with_a_huge_count_is_a_spec_error_at_once(cli, tmp_path):
    result = _in_512_mib(cli, "launch", "-n", "99999999999", "--", "true", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "<command line>: -n/--num-workers: 99999999999 workers" in result.stderr
    assert "--max-tasks" in result.stderr
    assert cli.run_dirs() == []


def test_a_count_above_the_ceiling_names_file_line_key_and_creates_nothing(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\nroles:\n  server: {count: 2}\n  worker: {count: 100000}\n")
    for backend in ("local", "sge", "slurm", "yarn"):
        result = _in_512_mib(cli, "submit", "--backend", backend, str(path))
        assert result.returncode == 2, result.stderr[-2000:]
        ceiling = "1000" if backend == "local" else "10000"
        assert (f"job.yaml:4: roles.worker.count: 100000 workers, 2 servers and the scheduler "
                f"are 100003 tasks, more than the {backend} backend's ceiling of {ceiling} "
                "tasks (to allow it, set max_tasks: 100003") in result.stderr
    assert cli.run_dirs() == [] and not (cli.home / "jobs").exists()


def test_max_tasks_moves_the_ceiling(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\nmax_tasks: 1203\nroles: {worker: {count: 1201}, "
                    "server: {count: 1}}\n")
    result = cli.run("render", "--json", str(path))
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["tasks"]) == 1203
    result = cli.run("render", str(path), "-n", "1202")
    assert result.returncode == 2
    assert "-n/--workers: 1202 workers, 1 servers and the scheduler are 1204 tasks, more " \
           "than max_tasks (1203)" in result.stderr
    path.write_text("command: x\nmax_tasks: 0\n")
    result = cli.run("render", str(path))
    assert result.returncode == 2 and "job.yaml:2: max_tasks: must be at least 1" in result.stderr


def test_nothing_started_for_bad_input(cli, tmp_path):
    """A rejected spec leaves no record, no run directory and no process; the same
    checks see a job of that name once one is really submitted (they can fail)."""
    name = f"nothing-started-{secrets.token_hex(4)}"  # no other run has this name
    command = json.dumps([sys.executable, str(FAKEROLE)])
    path = tmp_path / "job.yaml"
    path.write_text(f"name: {name}\ncommand: {command}\nroles: {{worker: {{count: 0}}}}\n")
    assert cli.run("submit", str(path)).returncode == 2
    assert cli.run_dirs() == [] and not list((cli.home / "jobs").glob("*.json"))
    assert processes_of_jobs_named(name) == []
    # the control: a good job of that name is seen by the same checks
    path.write_text(f"name: {name}\ncommand: {command}\nenv: {{FAKE_SLEEP: '600'}}\n"
                    "rendezvous: {grace: 1s}\n")
    job = cli.submit(path)
    try:
        assert job.startswith(name + "-") and len(cli.run_dirs()) == 1
        wait_for(lambda: processes_of_jobs_named(name), 60, "the job's processes")
    finally:
        assert cli.run("cancel", job).returncode == 0
    assert_no_processes(job)


# ------------------------------------------------------------------------ property test

KEYS = ["name", "command", "workdir", "env", "inherit_env", "resources", "roles", "network",
        "rendezvous", "backends", "container", "cpus", "memory", "gpus", "walltime",
        "scheduler", "server", "worker", "count", "interface", "ports", "dir",
        "startup_timeout", "grace", "local", "sge", "slots", "A", "x"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["1h", "10m", "9000-9999", "2G", "python3 t.py", ".",
                                     "-1", "0", "lo", "1:00:00", "'", "\"", "$HOME"]))
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), children,
                        max_size=6)),
    max_leaves=25)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents)
def test_random_documents_raise_only_spec_error(tmp_path, home, document):
    text = yaml.safe_dump(document)
    try:
        spec = specs.parse(text, tmp_path / "random.yaml")
    except SpecError as exc:  # names the file, and says something
        assert exc.path == tmp_path / "random.yaml" and str(exc).strip()
    else:  # a valid job: it has a name and a command for every role
        assert spec.name and all(spec.role(role).command for role in Role)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_random_text_raises_only_spec_error(tmp_path, home, text):
    try:
        spec = specs.parse(text, tmp_path / "random.yaml")
    except SpecError as exc:
        assert "random.yaml" in str(exc)  # one problem, or "N problems:" then each
    else:
        assert spec.name and all(spec.role(role).command for role in Role)


def test_example_spec_is_valid(home):
    spec = specs.load(Path(__file__).resolve().parent.parent / "examples" / "mlp-ps.yaml")
    assert (spec.role(Role.SERVER).count, spec.role(Role.WORKER).count) == (2, 2)
