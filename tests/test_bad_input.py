"""Bad input and broken storage (issue 18, bugs 10-12): a clear error and exit 2, not an
internal error (70), a hang or a machine's worth of memory; every case made for real (a
symlink loop, a FIFO, /dev/zero, a 100 MB line, a directory where a log should be,
parallel cancels). And small truths: what a command says is what happened."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import List, Tuple

import pytest

from mxbatch.backends.hosts.mpi import mpirun_said
from mxbatch.jobs.follow import LogTail
from mxbatch.runtime import logfile
from mxbatch.runtime.layout import RunLayout
from mxbatch.spec.inputfile import MAX_INPUT_BYTES

from .conftest import Cli, assert_no_processes, task_record, wait_for
from .test_local import fake_spec

#: how long a command that must refuse its input may take (a hang fails the test)
REFUSE_TIMEOUT_S = 60


def refused(cli: Cli, *args: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    """Run a command that must refuse its input: exit 2, no traceback, no internal error."""
    try:
        result = cli.run(*args, env=env, cwd=cwd, timeout=REFUSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mxbatch {' '.join(args)} hung on its input")
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return result


def symlink_loop(tmp_path: Path) -> Path:
    """A path through two links that point at each other."""
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return tmp_path / "loop-a" / "inside"


# ------------------------------------------------------------------ bug 10: exit 2, not 70


@pytest.mark.parametrize("where", ["workdir", "rendezvous.dir", "MXBATCH_HOME"])
def test_a_symlink_loop_is_exit_2_naming_the_place(cli, tmp_path, where):
    loop = symlink_loop(tmp_path)
    spec = tmp_path / "job.yaml"
    env = {}
    if where == "workdir":
        spec.write_text(f"command: ['true']\nworkdir: {loop}\n")
        expected = f"job.yaml:2: workdir: {loop} is behind a symlink loop"
    elif where == "rendezvous.dir":
        spec.write_text(f"command: ['true']\nrendezvous: {{dir: {loop}}}\n")
        expected = f"job.yaml:2: rendezvous.dir: {loop} is behind a symlink loop"
    else:
        spec.write_text("command: ['true']\n")
        env = {"MXBATCH_HOME": str(loop)}
        expected = "Too many levels of symbolic links"
    for command in (["render", str(spec)], ["submit", str(spec)],
                    ["launch", "--workdir", str(loop), "--", "true"]):
        if command[0] == "render" and where == "MXBATCH_HOME":
            continue  # render creates nothing: it needs no MXBATCH_HOME
        result = refused(cli, *command, env=env)
        if command[0] == "launch":
            assert f"workdir: {loop} is behind a symlink loop" in result.stderr
        else:
            assert expected in result.stderr, result.stderr
    if where == "MXBATCH_HOME":
        for command in (["list"], ["status", "job-0123abcd"]):
            result = refused(cli, *command, env=env)
            assert "MXBATCH_HOME" in result.stderr and "symlink loop" in result.stderr
    assert cli.run_dirs() == []


def test_a_job_id_that_is_no_job_id_never_reaches_a_path(cli, tmp_path):
    """``../../x`` would be ``$MXBATCH_HOME/jobs/../../x.json``: a record-like file
    there is never read, whatever the command."""
    planted = cli.home.parent / "x.json"
    planted.write_text(json.dumps({"job_id": "x", "backend": "local",
                                   "run_dir": str(tmp_path / "elsewhere")}))
    for args in (["status", "../../x"], ["logs", "../../x"], ["wait", "../../x"],
                 ["cancel", "../../x"], ["status", "x/../../../x"],
                 ["logs", "-f", "/etc/passwd"], ["clean", "../../x"]):
        result = refused(cli, *args)
        assert "is not a job id" in result.stderr and "elsewhere" not in result.stderr
    # a well-formed id, or the start of one, that names no job is "no such job" (exit 4)
    assert cli.run("status", "nosuch-0123abcd").returncode == 4
    assert cli.run("status", "job").returncode == 4


@pytest.fixture
def ended_job(cli, tmp_path) -> str:
    """A job of stand-in roles that has ended (its logs are all there)."""
    result = cli.run("submit", "--wait", str(fake_spec(tmp_path)))
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[0]


def test_logs_when_a_log_is_a_directory_is_exit_2(cli, ended_job):
    log = cli.run_dir(ended_job) / "logs" / "worker-0.log"
    log.unlink()
    log.mkdir()
    for extra in ([], ["--role", "worker"], ["--tail", "3"], ["-f"], ["--timestamps"]):
        result = refused(cli, "logs", ended_job, *extra)
        assert str(log) in result.stderr, result.stderr
        assert result.stdout == ""  # said before anything is printed
    shown = cli.run("logs", ended_job, "--role", "server", "-v")  # the others still show
    assert shown.returncode == 0 and "server[0]: starting" in shown.stdout


# ------------------------------------------------------------------ bug 11: hangs, memory


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "too-big"])
def test_a_spec_or_config_file_that_is_no_small_regular_file_is_refused(cli, tmp_path, kind):
    """A FIFO (nobody writes: reading it would block), /dev/zero (never ends), a
    directory, a file over 10 MB: exit 2 at once naming the file, as spec and as
    config file (``MXBATCH_CONFIG``), for render, submit and launch."""
    if kind == "fifo":
        path = tmp_path / "fifo.yaml"
        os.mkfifo(path)
        why = "it is a FIFO, not a regular file"
    elif kind == "dev-zero":
        path, why = Path("/dev/zero"), "it is a character device, not a regular file"
    elif kind == "directory":
        path, why = tmp_path / "folder.yaml", "it is a directory, not a regular file"
        path.mkdir()
    else:
        path, why = tmp_path / "huge.yaml", "it is larger than 10 MB"
        with open(path, "wb") as handle:
            handle.write(b"# " + b"x" * MAX_INPUT_BYTES + b"\ncommand: ['true']\n")
    good = fake_spec(tmp_path)
    attempts: List[Tuple[List[str], dict, str]] = [
        (["render", "--backend", "local", str(path)], {}, "the job spec"),
        (["submit", str(path)], {}, "the job spec"),
        (["render", str(good)], {"MXBATCH_CONFIG": str(path)}, "the config file"),
        (["launch", "--", "true"], {"MXBATCH_CONFIG": str(path)}, "the config file"),
    ]
    for args, env, what in attempts:
        if kind == "directory" and what == "the job spec":
            continue  # click refuses a directory as SPEC_FILE itself (exit 2)
        result = refused(cli, *args, env=env, cwd=tmp_path)
        assert f"{path}: cannot read {what}: {why}" in result.stderr, result.stderr
    assert cli.run_dirs() == []


def _peak_rss_mib(cli: Cli, *args: str) -> Tuple[int, float]:
    """Run ``mxbatch ARGS`` (its output thrown away) under a small Python that reports
    the largest resident set among the processes it waited for: the CLI, and the agent
    and roles it supervises (``RUSAGE_CHILDREN``)."""
    probe = ("import resource, subprocess, sys\n"
             "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
             "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    result = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "mxbatch",
                             *args], capture_output=True, text=True, env=cli.env, timeout=300)
    code, rss_kib = result.stdout.split()
    return int(code), int(rss_kib) / 1024


#: a role's line of 100 MiB without a newline
LINE_MIB = 100
#: what a reader of that job's output may use at most (the CLI alone needs ~40 MiB)
RSS_LIMIT_MIB = 90


def test_a_100_mb_line_without_a_newline_costs_no_memory(cli, tmp_path):
    """The worker prints 100 MiB without a newline: the attached launch (the agent's
    pipe reader and the streamed logs) and every way ``logs`` reads it stay far below
    the line's size (before the fix: 430-640 MiB), and nothing of it is lost."""
    script = (f'if [ "$DMLC_ROLE" = worker ]; then head -c {LINE_MIB << 20} /dev/zero '
              f'| tr "\\0" x; fi')
    code, rss = _peak_rss_mib(cli, "launch", "--name", "longline", "-n", "1", "-s", "1",
                              "--", "sh", "-c", script)
    assert code == 0 and rss < RSS_LIMIT_MIB, (code, rss)
    job = next(cli.home.joinpath("jobs").glob("longline-*.json")).stem
    for extra in ([], ["--role", "worker"], ["--tail", "1"], ["-f"], ["--timestamps"]):
        code, rss = _peak_rss_mib(cli, "logs", job, *extra)
        assert code == 0 and rss < RSS_LIMIT_MIB, (extra, code, rss)
    log = cli.run_dir(job) / "logs" / "worker-0.log"
    with open(log, "rb") as handle:
        pieces = list(logfile.read_lines(handle))
    assert sum(map(len, pieces)) == log.stat().st_size > LINE_MIB << 20
    assert len(pieces) > LINE_MIB and max(map(len, pieces)) < 2 * logfile.MAX_LINE
    assert_no_processes(job)


def test_a_long_line_is_read_in_pieces_at_the_right_offsets(tmp_path, monkeypatch):
    monkeypatch.setattr(logfile, "READ_CHUNK", 4)
    monkeypatch.setattr(logfile, "BACK_CHUNK", 3)
    path = tmp_path / "task.log"
    path.write_bytes(b"one\n" + b"a" * 10 + b"\nlast")
    tail = LogTail(path, "")
    tail._lines = logfile.LineSplitter(max_line=4)
    lines = list(tail.read_lines()) + list(tail.read_lines(final=True))
    assert lines == [(0, "one"), (4, "aaaa"), (8, "aaaa"), (12, "aa"), (15, "last")]
    for count, offset in ((0, 19), (1, 15), (2, 4), (3, 0), (9, 0)):
        tail.skip_to_last(count)
        assert tail.offset == offset, count
    with open(path, "rb") as handle:
        assert list(logfile.newlines_backwards(handle, 19)) == [14, 3]


def test_what_mpirun_said_is_read_from_a_bounded_part_of_its_log(tmp_path):
    """mpirun's log may hold anything written to it: its first words are read, not all
    of 20 MiB without a newline."""
    log = tmp_path / "mpirun.log"
    with open(log, "wb") as handle:
        handle.write(b"mpirun was unable to launch the specified application\n")
        handle.write(b"x" * (20 << 20))
    tracemalloc.start()
    try:
        said = mpirun_said(str(log))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said.startswith("mpirun was unable to launch")
    assert peak < 4 * logfile.READ_CHUNK, peak


# ------------------------------------------------------------------ bug 12: small truths


def _json_of(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_parallel_cancels_each_say_what_they_found(cli, tmp_path):
    """Two cancels of one job: the second finds it CANCELLED with a task still stopping
    (the worker ignores SIGTERM until told). It says it had already ended, in the state
    it found (never ``already_ended: false`` with ``state_before: CANCELLED``)."""
    stop = tmp_path / "stop"
    worker = ["sh", "-c", f"trap '' TERM; while [ ! -e '{stop}' ]; do sleep 0.1; done"]
    job = cli.submit(fake_spec(tmp_path, worker_command=worker, grace="120s"))
    run_dir = cli.run_dir(job)
    wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("state") == "RUNNING",
             60, "the worker to run")
    first = cli.popen("cancel", job, "--json")
    seen = wait_for(lambda: (lambda s: s if s["state"] == "CANCELLED" else None)(
        cli.status(job)), 60, "the first cancel's abort")
    assert not seen["terminal"]  # the worker is still there
    cancel_record = Path(RunLayout(str(run_dir)).cancel)
    first_write = cancel_record.stat().st_ino
    second = cli.popen("cancel", job, "--json")
    # the second cancel has read the status once it writes its own cancel record
    wait_for(lambda: cancel_record.stat().st_ino != first_write, 60,
             "the second cancel to write its cancel record")
    stop.touch()
    one, two = _json_of(first), _json_of(second)
    assert (one["state_before"], one["already_ended"], one["state"]) == \
        ("RUNNING", False, "CANCELLED")
    assert (two["state_before"], two["already_ended"], two["state"]) == \
        ("CANCELLED", True, "CANCELLED")
    assert_no_processes(job)


def test_a_line_break_in_a_container_env_value_is_a_spec_error(cli, tmp_path):
    """docker's and podman's env files hold one line a variable: such a value would be
    left out of the container (and of render's recipe) without a word."""
    path = tmp_path / "job.yaml"
    for runtime in ("docker", "podman"):
        path.write_text(f'command: x\nenv: {{A: "one\\ntwo"}}\n'
                        f'container: {{runtime: {runtime}, image: img}}\n')
        for command in ("render", "submit"):
            result = refused(cli, command, str(path))
            assert f"{path}:2: env.A: a value with a line break cannot reach a {runtime} " \
                   "container" in result.stderr, result.stderr
    path.write_text("command: x\ncontainer: {image: img}\n")
    result = refused(cli, "render", str(path), "--env", "B=one\rtwo")
    assert "env.B: a value with a line break" in result.stderr
    path.write_text('command: x\nroles: {worker: {env: {C: "a\\nb"}}}\n'
                    "container: {image: img}\n")
    assert "roles.worker.env.C: a value with a line break" in \
        refused(cli, "render", str(path)).stderr
    # apptainer's env file is shell: the value is quoted, and reaches the role whole
    path.write_text('command: x\nenv: {A: "one\\ntwo"}\n'
                    "container: {runtime: apptainer, image: /images/m.sif}\n")
    rendered = cli.run("render", str(path))
    assert rendered.returncode == 0 and "A='one\ntwo'" in rendered.stdout
    assert cli.run_dirs() == []


@pytest.mark.parametrize("value, words", [
    ("${HOME", "a ${ without its closing } in the path '${HOME'"),
    ("/data/${HOME", "a ${ without its closing }"),
    ("${MXBATCH_SURELY_UNSET_H18}", "$MXBATCH_SURELY_UNSET_H18 is not set"),
])
def test_a_path_with_an_unclosed_brace_says_so(cli, tmp_path, value, words):
    path = tmp_path / "job.yaml"
    path.write_text(f'command: x\nworkdir: "{value}"\n')
    result = refused(cli, "render", str(path))
    assert f"{path}:2: workdir: {words}" in result.stderr, result.stderr
    assert "$HOME is not set" not in result.stderr


def test_doctor_slurm_says_its_fix_in_words(cli, tmp_path):
    """slurmctld does not answer (a stand-in scontrol that fails, no cluster needed):
    the check's fix is the hint itself, as text and in --json (which exited 70)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'slurm_load_ctl_conf error: Unable to contact "
                        "slurm controller' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{cli.env['PATH']}", "SLURM_CONF": "",
           "DRMAA_LIBRARY_PATH": ""}
    text = cli.run("doctor", "--backend", "slurm", "--no-probe", env=env, timeout=300)
    assert text.returncode == 1, text.stderr
    assert "bound method" not in text.stdout
    assert re.search(r"FAIL +slurmctld answers .*\n +fix: is slurmctld running", text.stdout), \
        text.stdout
    result = cli.run("doctor", "--backend", "slurm", "--no-probe", "--json", env=env,
                     timeout=300)
    assert result.returncode == 1, result.stderr
    check = {c["name"]: c for c in json.loads(result.stdout)["checks"]}["slurmctld answers"]
    assert check["outcome"] == "fail" and check["fix"].startswith("is slurmctld running")


# ------------------------------------------------------------------ what the fuzz test found


@pytest.mark.parametrize("text, words", [
    ("command: x\nresources: {walltime: []}\n",
     "resources.walltime: expected a duration like 30s, 10m or 1h, got []"),
    ("command: x\nresources: {memory: {a: 1}}\n",
     "resources.memory: expected a size like 512M or 2G, got {'a': 1}"),
    ("command: [true]\n", "command: each word of a command is a string (or a number), got a "
                          "boolean at [0] (write 'true' in quotes)"),
    ("command: x\nname: \x01\n", ":2: malformed YAML: special characters are not allowed "
                                 "(#x0001)"),
])
def test_spec_values_random_input_found_are_spec_errors(cli, tmp_path, text, words):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    result = refused(cli, "render", str(path))
    assert words in result.stderr, result.stderr
    assert "<unicode string>" not in result.stderr


def test_a_profile_without_a_config_file_says_why_there_is_none(cli, tmp_path):
    result = refused(cli, "render", "-p", "x", str(fake_spec(tmp_path)),
                     env={"MXBATCH_CONFIG": ""})
    assert "no profile 'x' (no config file: MXBATCH_CONFIG is set empty)" in result.stderr
