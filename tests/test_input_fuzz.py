"""Random input to ``render``, ``submit`` and ``launch`` (issue 18): random bytes as the
spec file, random YAML documents shaped like specs, random command lines built from the
commands' own flags and odd values. Whatever comes in: never a traceback, never exit 70
(an internal error), never more than a few CPU seconds, never more than 200 MB.

Most examples run in this process through click's ``CliRunner`` (a process each would
cost a second); ``test_real_processes_...`` runs some as real ``mxbatch`` processes with
their address space limited to 200 MB (``RLIMIT_AS``). What a valid spec would start is
not this test's matter: the submission itself (``jobs.submit.submit``) is replaced by a
stand-in that ends the command with ``REACHED`` once everything before it passed, so no
job ever runs. Nothing reaches a cluster or a network: ``PATH`` holds only the test's
Python (no ssh, docker, qsub, sbatch or mpirun), no scheduler's environment is set, and
every path the generated YAML writes is relative (no ``/``, ``~`` or ``$``), so a run
directory is made nowhere but under the test's temporary folder.

CI runs 40 examples of each command in process and 10 real processes (about 15-40 s);
``FUZZ_EXAMPLES=1500 FUZZ_PROCESSES=80`` searches longer.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Union

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxbatch.cli.commands import main
from mxbatch.errors import ExitCode, MxbatchError
from mxbatch.jobs import submit as jobs
from mxbatch.spec.parse import SPEC_KEYS

#: the exit code of a command whose input passed every check (the stand-in submission)
REACHED = 99
#: the most CPU time one command may take (load on the machine does not count)
CPU_LIMIT_S = 5.0
#: the address space of a real mxbatch process (RLIMIT_AS)
MEMORY_LIMIT = 200 << 20
#: how much one in-process example may add to this process's peak memory
MEMORY_GROWTH_LIMIT_KIB = 200 << 10
#: in-process examples for each command; real processes in all (more: see the top)
IN_PROCESS_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", 40))
REAL_PROCESSES = int(os.environ.get("FUZZ_PROCESSES", 10))

_SETTINGS = dict(deadline=None, database=None, derandomize=False,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])

# ------------------------------------------------------------------ what is generated

#: text without what would make a path absolute or reach outside the test's folders
_TEXT = st.text(st.characters(blacklist_characters="/~$\x00",
                              blacklist_categories=("Cs",)), max_size=24)
_WORDS = st.sampled_from([
    "x", "python3 train.py", "true", "1h", "30s", "0s", "-1s", "10m", "nan", "inf",
    "9000-9999", "9999-9000", "0-0", "65536", "10G", "0", "4096M", "auto", "docker",
    "podman", "apptainer", "all", "none", "img", "data:data:ro", "SIGUSR1", "failure",
    "lo", "eth0", "local", "ssh", "mpi", "sge", "slurm", "nope", "qsub", "sbatch",
    "drmaa", "${HOME", "$$", "a\nb", "caf\u00e9"])
_KEYS = st.sampled_from(sorted(set(SPEC_KEYS) | {
    "count", "command", "env", "resources", "cpus", "memory", "gpus", "walltime",
    "interface", "ports", "dir", "startup_timeout", "grace", "heartbeat_timeout",
    "stall_timeout", "runtime", "image", "mounts", "options", "max", "on", "backoff",
    "checkpoint_signal", "checkpoint_grace", "worker", "server", "scheduler", "local",
    "ssh", "mpi", "sge", "slurm", "yarn", "slots", "hosts", "hostfile", "submitter",
    "queue", "partition", "native", "extra", "het", "gang", "pe"})) | _TEXT
_SCALARS = (st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
            | st.floats(allow_nan=True, allow_infinity=True) | _TEXT | _WORDS)
#: what a key's value often is
_LIKELY = _WORDS | st.integers(-3, 20) | st.booleans() | st.lists(_WORDS, max_size=3)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(_KEYS, inner, max_size=5), max_leaves=20)
#: a job spec that is valid as it is: what ``_SPECS`` changes a few keys of, so that
#: most documents get far into validation, planning and rendering
_VALID = {"name": "fuzz", "command": "true", "roles": {"server": {"count": 1},
                                                        "worker": {"count": 2}},
          "rendezvous": {"grace": "1s"}}
#: where a key may be put (the last part of each: its name)
_KEY_PATHS = [("name",), ("backend",), ("command",), ("workdir",), ("inherit_env",),
              ("core_dumps",), ("max_tasks",), ("env", "A"), ("env", "B C"),
              ("roles", "worker", "count"), ("roles", "server", "count"),
              ("roles", "scheduler", "count"), ("roles", "worker", "command"),
              ("roles", "worker", "env", "W"), ("roles", "worker", "resources", "gpus"),
              ("resources", "cpus"), ("resources", "memory"), ("resources", "gpus"),
              ("resources", "walltime"), ("network", "interface"), ("network", "ports"),
              ("rendezvous", "dir"), ("rendezvous", "startup_timeout"),
              ("rendezvous", "grace"), ("rendezvous", "heartbeat_timeout"),
              ("rendezvous", "stall_timeout"), ("container", "image"),
              ("container", "runtime"), ("container", "mounts"), ("container", "options"),
              ("container", "gpus"), ("restarts", "max"), ("restarts", "on"),
              ("restarts", "backoff"), ("restarts", "checkpoint_signal"),
              ("backends", "local", "slots"), ("backends", "ssh", "hosts"),
              ("backends", "sge", "submitter"), ("backends", "sge", "native"),
              ("backends", "slurm", "extra"), ("backends", "slurm", "het"),
              ("backends", "mpi", "hosts"), ("backends", "nope", "x")]


def _put(document: dict, key_path, value) -> dict:
    """``document`` with ``value`` at ``key_path`` (mappings made on the way)."""
    node = document
    for key in key_path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[key_path[-1]] = value
    return document


@st.composite
def _specs(draw) -> dict:
    """The valid spec with up to three keys set to a likely value or to anything."""
    document = yaml.safe_load(yaml.safe_dump(_VALID))  # a deep copy
    for _ in range(draw(st.integers(0, 3))):
        key_path = draw(st.sampled_from(_KEY_PATHS) | st.lists(_KEYS, min_size=1,
                                                               max_size=3).map(tuple))
        _put(document, key_path, draw(_LIKELY | _VALUES))
    return document


_SPECS = _specs()


@st.composite
def spec_texts(draw) -> bytes:
    """The bytes of a spec file: mostly a spec-like YAML document, else any YAML
    document, random bytes, or a spec with random bytes put in somewhere."""
    kind = draw(st.sampled_from(["spec", "spec", "spec", "spec", "yaml", "bytes",
                                 "mangled"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    text = yaml.safe_dump(draw(_VALUES if kind == "yaml" else _SPECS),
                          allow_unicode=True).encode()
    if kind != "mangled":
        return text
    at = draw(st.integers(0, len(text)))
    return text[:at] + draw(st.binary(min_size=1, max_size=20)) + text[at:]


#: values of each flag of render, submit and launch (None: a switch)
_COUNTS = st.sampled_from(["0", "1", "2", "-1", "99999999999", "1e3", "nan", "x"])
_FLAG_VALUES = {
    "-b": st.sampled_from(["local", "local", "ssh", "mpi", "sge", "slurm", "nope"]),
    "-n": _COUNTS, "-s": _COUNTS, "--max-restarts": _COUNTS, "--max-tasks": _COUNTS,
    "--name": st.sampled_from(["job", "a.b-c_d", "-x", "", "é"]) | _TEXT,
    "-e": st.sampled_from(["A=1", "A", "=x", "A=a\nb", "1A=2", "A=é"])
          | _TEXT,
    "-p": st.sampled_from(["default", "nope"]) | _TEXT,
    "--format": st.sampled_from(["text", "json", "shell", "yaml"]),
    "--workdir": st.sampled_from([".", "..", "nowhere", "${HOME", ""]) | _TEXT,
    "--interface": st.sampled_from(["lo", "nosuch0", ""]),
    "--ports": st.sampled_from(["9000-9999", "1-0", "70000", "x"]),
    "--startup-timeout": st.sampled_from(["1s", "0", "-5", "nan", "1y"]),
    "--grace": st.sampled_from(["1s", "0", "-5", "nan"]),
    "--stall-timeout": st.sampled_from(["1s", "0", "none", "nan"]),
    "--container": st.sampled_from(["docker:img", "podman:", "apptainer:/x.sif", "x"]),
    "--mount": st.sampled_from(["/tmp:/data", "data:/data", "a:b:c:d"]),
    "--render": st.sampled_from(["text", "json", "shell", "yaml"]),
    "--env-server": st.sampled_from(["A:1", "A", ":"]),
    "--env-worker": st.sampled_from(["A:1", "A", ":"]),
    "-H": st.just("HOSTFILE"),
    "--launcher": st.sampled_from(["local", "ssh", "mpi", "nope"]),
    "--json": None, "--all": None, "-w": None, "--detach": None, "-q": None,
    "--p3": None, "-h": None,
}
_RENDER_FLAGS = ["-b", "-n", "-s", "-p", "--name", "-e", "--json", "--format", "--all"]
_SUBMIT_FLAGS = ["-b", "-n", "-s", "-p", "--name", "-e", "--json", "-w", "--detach", "-q",
                 "--max-restarts"]
_LAUNCH_FLAGS = ["-n", "-s", "-H", "--launcher", "-b", "-p", "-e", "--env-server",
                 "--env-worker", "--p3", "--name", "--workdir", "--interface", "--ports",
                 "--startup-timeout", "--grace", "--stall-timeout", "--container",
                 "--mount", "--max-tasks", "--max-restarts", "--render", "--detach", "-q",
                 "--json"]


@st.composite
def _options(draw, flags: List[str]) -> List[str]:
    """A few of ``flags``, each with a value of its kind."""
    words: List[str] = []
    for flag in draw(st.lists(st.sampled_from(flags), max_size=3)):
        values = _FLAG_VALUES[flag]
        words += [flag] if values is None else [flag, draw(values)]
    return words


@st.composite
def command_lines(draw, command: str, spec: Path, hostfile: Path) -> List[str]:
    """A command line of ``command``: mostly well-formed (its flags with values of
    their kind, then the spec file, or launch's role command), sometimes any words."""
    if command == "launch":
        flags = draw(_options(_LAUNCH_FLAGS))
        role = draw(st.sampled_from([["true"], ["python3", "train.py", "--epochs", "1"],
                                     ["--", "true"], []]) | st.lists(_TEXT, max_size=3))
        words = ["launch"] + flags + role
    else:
        flags = draw(_options(_RENDER_FLAGS if command == "render" else _SUBMIT_FLAGS))
        extra = draw(st.sampled_from([[], ["--", "--epochs", "3"]]))
        words = [command] + flags + [str(spec)] + extra
    if draw(st.sampled_from([False, False, False, True])):  # any words, anywhere
        for word in draw(st.lists(st.sampled_from(list(_FLAG_VALUES)) | _TEXT, min_size=1,
                                  max_size=3)):
            words.insert(draw(st.integers(1, len(words))), word)
    return [str(hostfile) if w == "HOSTFILE" else w for w in words]


# ------------------------------------------------------------------ how it is run


def sandbox(tmp_path: Path) -> Dict[str, str]:
    """The environment of every example: its own MXBATCH_HOME, no config file, only this
    Python on PATH, no scheduler's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SGE_", "SLURM", "DRMAA", "YARN", "HADOOP", "MXBATCH_",
                                "OMPI_", "PBS_", "PE_", "JOB_ID"))}
    env.update(MXBATCH_HOME=str(tmp_path / "home"), MXBATCH_CONFIG="",
               PATH=os.path.dirname(sys.executable), TMPDIR=str(tmp_path))
    return env


@pytest.fixture
def stopped_submission(monkeypatch):
    """``jobs.submit.submit`` ends the command with ``REACHED`` instead of submitting."""
    def reached(backend, request):
        raise MxbatchError("(test) every check passed: no job is submitted", REACHED)
    monkeypatch.setattr(jobs, "submit", reached)


def _check(code: int, out: str, what: List[str]) -> None:
    assert code != ExitCode.INTERNAL, (what, out)
    assert "Traceback" not in out and "internal error" not in out, (what, out)


def _write(folder: Path, data: bytes) -> Path:
    path = folder / f"spec-{time.monotonic_ns()}.yaml"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("command", ["render", "submit", "launch"])
def test_random_input_in_process_never_crashes(command, tmp_path, monkeypatch,
                                               stopped_submission):
    env = sandbox(tmp_path)
    env.update({name: None for name in os.environ if name not in env})  # removed
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    hostfile = tmp_path / "hostfile"
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @settings(max_examples=IN_PROCESS_EXAMPLES, **_SETTINGS)
    @given(data=st.data())
    def example(data):
        spec = _write(tmp_path, data.draw(spec_texts(), "spec"))
        hostfile.write_bytes(data.draw(st.binary(max_size=60) | st.just(b"localhost\n"),
                                       "hostfile"))
        argv = data.draw(command_lines(command, spec, hostfile), "argv")
        started = time.process_time()
        result = runner.invoke(main, argv, env=env, catch_exceptions=True)
        took = time.process_time() - started
        unexpected = (result.exception if not isinstance(result.exception, SystemExit)
                      else None)
        assert unexpected is None, (argv, repr(unexpected))
        _check(result.exit_code, result.output, argv)
        assert took < CPU_LIMIT_S, (argv, took)

    example()
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert growth < MEMORY_GROWTH_LIMIT_KIB, growth


#: a real ``mxbatch`` process whose submission stops like ``stopped_submission``'s
_STOPPED_MXBATCH = f"""
import sys
from mxbatch.errors import MxbatchError
from mxbatch.jobs import submit as jobs
def reached(backend, request):
    raise MxbatchError("(test) every check passed: no job is submitted", {REACHED})
jobs.submit = reached
sys.argv[0] = "mxbatch"
from mxbatch.cli.entry import run
run()
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (30, 30))


def test_real_processes_with_random_input_never_crash(tmp_path):
    """Real processes: the argv as bytes reach mxbatch as the OS gives them, stdout and
    stderr are real pipes, and the address space is 200 MB."""
    env = sandbox(tmp_path)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost\n")

    @settings(max_examples=REAL_PROCESSES, **_SETTINGS)
    @given(data=st.data())
    def example(data):
        command = data.draw(st.sampled_from(["render", "submit", "launch"]), "command")
        spec = _write(tmp_path, data.draw(spec_texts(), "spec"))
        argv: List[Union[str, bytes]] = list(
            data.draw(command_lines(command, spec, hostfile), "argv"))
        # (hypothesis refuses a list of st.nothing() with a max_size: no draw at all then)
        undecodable = (data.draw(st.lists(st.integers(1, len(argv) - 1), max_size=2),
                                 "undecodable") if len(argv) > 1 else [])
        for index in undecodable:
            argv[index] = data.draw(st.binary(min_size=1, max_size=8).filter(
                lambda b: b"\0" not in b), "bytes")  # no UTF-8, as the OS may give
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            result = subprocess.run([sys.executable, "-c", _STOPPED_MXBATCH, *argv],
                                    capture_output=True, env=env, cwd=tmp_path, timeout=120,
                                    preexec_fn=_limited)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mxbatch {argv} still running after 120 s")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out = (result.stdout + result.stderr).decode(errors="replace")
        assert result.returncode >= 0, (argv, result.returncode, out)  # no signal death
        _check(result.returncode, out, argv)
        assert "MemoryError" not in out, (argv, out)
        assert cpu < CPU_LIMIT_S, (argv, cpu)

    example()
