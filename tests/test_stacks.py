"""A hung role is shown where it hangs (issue 36): its supervisor asks the role's Python
for its threads' stacks once it has been idle a while (the hook's faulthandler), keeps
the main thread's innermost frames in the task record, and the stall or deadlock
reason quotes them; a stopped role is said to be stopped. Nothing is claimed that was
not measured. Stand-in roles (small Python scripts that connect to a stand-in
scheduler, ``fakerole``), real processes and signals, the local backend."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

from mxbatch.runtime.layout import RunLayout

from .conftest import FAKEROLE, assert_no_processes, task_record, wait_for, write_spec

#: a server or worker: joins the stand-in scheduler as ps-lite would, then does what
#: $IDLER_<rank> (workers) or $IDLER_SERVER says: "exit", "sleep" (line SLEEP_LINE,
#: its own code), "wait" (line WAIT_LINE: a wait for another role, as a blocked kvstore
#: call waits), or "tick" (busy, printing)
IDLER = '''\
import os, socket, sys, threading, time
try:
    import sitecustomize
    sitecustomize.mxbatch_wait_for_scheduler()
except (ImportError, AttributeError):
    pass
held = socket.create_connection((os.environ["DMLC_PS_ROOT_URI"],
                                 int(os.environ["DMLC_PS_ROOT_PORT"])), timeout=30)
role, rank = os.environ["DMLC_ROLE"], os.environ["MXBATCH_RANK"]
what = os.environ.get("IDLER_SERVER" if role == "server" else "IDLER_" + rank, "exit")
print("%s[%s] ran its batches; now: %s" % (role, rank, what), flush=True)
if what == "sleep":
    time.sleep(600)  # in its own code
elif what == "wait":
    threading.Event().wait()  # waiting for another role
elif what == "tick":
    while True:
        print("tick", flush=True)
        time.sleep(0.2)
'''
SLEEP_LINE = IDLER.splitlines().index("    time.sleep(600)  # in its own code") + 1
WAIT_LINE = IDLER.splitlines().index("    threading.Event().wait()  # waiting for another role") + 1


def idler_spec(tmp_path: Path, env: str, rendezvous: str, workers: int = 2) -> Path:
    (tmp_path / "idler.py").write_text(IDLER)
    idler = json.dumps([sys.executable, str(tmp_path / "idler.py")])
    scheduler = json.dumps([sys.executable, str(FAKEROLE)])
    return write_spec(
        tmp_path / "job.yaml",
        f"name: stacks\ncommand: {idler}\nworkdir: {tmp_path}\nenv: {{{env}}}\n"
        f"roles: {{scheduler: {{command: {scheduler}}}, server: {{count: 1}}, "
        f"worker: {{count: {workers}}}}}\n"
        f"rendezvous: {{startup_timeout: 2m, grace: 2s, {rendezvous}}}\n")


def own_frame(frames: list) -> tuple:
    """(path, line) of the innermost frame of a record's stack that is not threading's."""
    own = next(f for f in frames if not f["path"].endswith("threading.py"))
    return own["path"], own["line"]


def abort_of(cli, job: str) -> dict:
    return json.loads(Path(RunLayout(str(cli.run_dir(job))).abort).read_text())


def test_a_worker_idle_in_its_own_code_is_shown_there_and_is_no_deadlock(cli, tmp_path):
    """Issue 36's job: both workers ran their batches, worker[0]'s code finished, and
    worker[1] sleeps in its own code. That is no kvstore deadlock (the code before
    said "blocked in a kvstore call ... different numbers of batches" after
    exit_timeout): the job fails only at the stall timeout, naming the line it sleeps
    at, from its stack."""
    spec = idler_spec(tmp_path, "IDLER_0: exit, IDLER_1: sleep",
                      "exit_timeout: 2s, stall_timeout: 8s")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "different numbers of batches" not in result.stderr
    assert "kvstore" not in result.stderr, result.stderr[-2000:]
    assert re.search(r"FAILED: worker\[1\] stalled: it has used no CPU and written no output "
                     rf"for \d+s at idler\.py:{SLEEP_LINE} in <module> \(time\.sleep\(600\)  # "
                     r"in its own code\) \(stall timeout 8s\)", result.stderr), \
        result.stderr[-2000:]
    job = result.stdout.split()[0]
    abort = abort_of(cli, job)
    assert abort["end"] == "stall" and (abort["role"], abort["rank"]) == ("worker", 1)
    record = task_record(cli.run_dir(job), "worker", 1)
    frames = record["stack"]["frames"]
    assert frames[0]["path"] == str(tmp_path / "idler.py") and frames[0]["line"] == SLEEP_LINE
    assert frames[0]["function"] == "<module>" and frames[0]["text"].startswith("time.sleep(")
    # the dump is in the role's log, after the supervisor's note that asked for it
    log = Path(record["log"]).read_text()
    asked = log.index("asking its Python for its threads' stacks")
    assert log.index("(most recent call first):", asked) > asked
    assert f'File "{tmp_path / "idler.py"}", line {SLEEP_LINE} in <module>' in log
    assert_no_processes(job)


def test_a_stopped_worker_is_said_to_be_stopped_and_the_waiting_roles_are_shown(
        cli, tmp_path):
    """worker[0] is SIGSTOPped: it cannot dump its stack, so the reason says it is
    stopped (measured from /proc) and shows where the server waits, from its stack."""
    spec = idler_spec(tmp_path, "IDLER_0: sleep, IDLER_SERVER: wait", "stall_timeout: 6s",
                      workers=1)
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    record = wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("environment")
                      and task_record(run_dir, "worker", 0), 60, "worker[0]'s hook report")
    os.kill(record["pid"], signal.SIGSTOP)
    result = cli.run("wait", job, "--timeout", "120", timeout=150)
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r"worker\[0\] stalled: its process has been stopped \(SIGSTOP or frozen\)"
                     r"[^;]*, so it cannot show its stack", result.stderr), result.stderr[-2000:]
    # (innermost: threading's own wait, then the script's line that called it)
    assert re.search(r"; the others: server\[0\] idle \d+s at threading\.py:\d+ in wait "
                     rf"\(.+\), from idler\.py:{WAIT_LINE} in <module> "
                     r"\(threading\.Event\(\)\.wait\(\)", result.stderr), result.stderr[-2000:]
    abort = abort_of(cli, job)
    assert abort["end"] == "stall" and (abort["role"], abort["rank"]) == ("worker", 0)
    frames = task_record(run_dir, "server", 0)["stack"]["frames"]
    assert frames[0]["path"].endswith("threading.py") and frames[0]["function"] == "wait"
    assert own_frame(frames) == (str(tmp_path / "idler.py"), WAIT_LINE)
    assert_no_processes(job)


def test_status_shows_how_long_each_role_is_quiet_its_cpu_and_where_it_idles(
        cli, tmp_path):
    """A hung job is visible long before the stall timeout (30 min, the default): each
    running role's record has when it last wrote output, its CPU use, and once idle a
    while, where (the dump comes after 10 s of idleness at most)."""
    spec = idler_spec(tmp_path, "IDLER_0: tick, IDLER_1: wait", "exit_timeout: 20m")
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)
    record = wait_for(lambda: (task_record(run_dir, "worker", 1) or {}).get("stack")
                      and task_record(run_dir, "worker", 1), 60, "worker[1]'s stack")
    assert own_frame(record["stack"]["frames"]) == (str(tmp_path / "idler.py"), WAIT_LINE)
    busy = wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("cpu_pct")
                    is not None and task_record(run_dir, "worker", 0), 30, "worker[0]'s CPU")
    assert busy["stack"] == {} and busy["cpu_s"] > 0 and busy["output_at"] is not None
    status = cli.status(job)
    waiting = next(t for t in status["tasks"] if t["role"] == "worker" and t["rank"] == 1)
    assert own_frame(waiting["stack"]["frames"])[1] == WAIT_LINE
    assert waiting["progress_at"] is not None and waiting["cpu_s"] is not None
    table = cli.run("status", job).stdout
    row = next(line for line in table.splitlines() if line.startswith("worker[1]"))
    assert re.search(r"output \d+s ago, CPU \d+%, idle \d+s \(since \d\d:\d\d:\d\d\) at "
                     rf"threading\.py:\d+ in wait .*, from idler\.py:{WAIT_LINE} in <module>",
                     row), table
    cli.run("cancel", job)
    assert_no_processes(job, timeout=30)
