"""The stack dump a role's hook gives on request (issue 36), piece by piece: the hook
registers faulthandler on a spare signal and says which, ``/proc`` shows the handler,
the dump of a real process is read into the main thread's innermost frames whole or
in pieces, and the words a diagnosis makes of them claim only what was measured."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from mxbatch.runtime import diagnosis, procstat, pyhook, rolehook
from mxbatch.runtime.roles import Role
from mxbatch.runtime.stacks import DumpReader, MainStack, StackFrame
from mxbatch.runtime.stackwatch import dump_after
from mxbatch.runtime.states import TaskRecord, TaskState
from mxbatch.runtime.wire import HookEvent

from .conftest import wait_for

SCRIPT = """\
import sys, time
print("ready", flush=True)
def wait_here():
    time.sleep(600)
wait_here()
"""


def _start(tmp_path: Path, hooked: bool = True) -> subprocess.Popen:
    (tmp_path / "sleeper.py").write_text(SCRIPT)
    env = dict(os.environ, MXBATCH_ROLE="worker", MXBATCH_RANK="1")
    env.pop("MXBATCH_HOOK_PID", None)
    if hooked:
        env["PYTHONPATH"] = pyhook.install(str(tmp_path / "hook"))
    return subprocess.Popen([sys.executable, str(tmp_path / "sleeper.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


#: how long a test waits for a line or a dump of its stand-in at most
READ_S = 60.0


def _read(fd: int, deadline: float, within: Optional[float] = None) -> Optional[bytes]:
    """One byte of ``fd`` (raw, no buffer that could swallow later bytes), b"" at its
    end; fails the test at the deadline; None when ``within`` seconds pass first."""
    left = max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([fd], [], [], left if within is None else min(left, within))
    if not ready:
        if within is not None and time.monotonic() < deadline:
            return None
        pytest.fail(f"nothing read within {READ_S:g}s")
    return os.read(fd, 1)


def _line(stream) -> bytes:
    """The next line of ``stream`` (read raw, with a deadline)."""
    deadline, line = time.monotonic() + READ_S, b""
    while not line.endswith(b"\n"):
        byte = _read(stream.fileno(), deadline)
        if not byte:
            break
        line += byte
    return line


def test_a_hooked_role_dumps_its_main_thread_on_its_signal_and_keeps_running(tmp_path):
    proc = _start(tmp_path)
    try:
        report = rolehook.parse_line(_line(proc.stderr))
        assert report is not None and report.event is HookEvent.STARTED
        assert report.stack_signal is not None and report.thread and report.pid == proc.pid
        assert _line(proc.stdout) == b"ready\n"
        wait_for(lambda: procstat.catches(proc.pid, report.stack_signal, proc.pid), 10,
                 "the handler in /proc")
        assert not procstat.catches(proc.pid, report.stack_signal, proc.pid + 1)  # its group
        os.kill(proc.pid, report.stack_signal)
        reader = DumpReader()
        reader.expect(report.thread, report.pid)
        own = []
        deadline = time.monotonic() + READ_S
        while reader.latest is None or len(reader.latest.frames) < 2:
            byte = _read(proc.stderr.fileno(), deadline, within=10.0)
            if byte is None:  # nothing for 10 s on a loaded machine: ask once more
                os.kill(proc.pid, report.stack_signal)
                continue
            assert byte, "the role's stderr ended before its dump did"
            own.append(reader.feed(byte, time.time()))
        assert not any(own)  # a dump is no output of the role's own
        frames = reader.latest.frames
        script = str(tmp_path / "sleeper.py")
        assert frames[0] == StackFrame(script, 4, "wait_here", "time.sleep(600)")
        assert frames[1] == StackFrame(script, 5, "<module>", "wait_here()")
        assert reader.latest.describe() == "at sleeper.py:4 in wait_here (time.sleep(600))"
        assert proc.poll() is None  # it goes on
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: not procstat.catches(proc.pid, report.stack_signal, proc.pid), 10,
                 "the stop to show")  # a stopped process is never asked
    finally:
        proc.kill()
        proc.wait()


def test_a_process_without_the_hook_is_never_sent_the_signal(tmp_path):
    proc = _start(tmp_path, hooked=False)
    try:
        assert _line(proc.stdout) == b"ready\n"
        rtmin = getattr(signal, "SIGRTMIN", signal.SIGUSR2)
        assert not procstat.catches(proc.pid, rtmin + pyhook.STACK_SIGNAL_OFFSET, proc.pid)
    finally:
        proc.kill()
        proc.wait()


DUMP = (b"Thread 0x00007f3c1e9fd6c0 (most recent call first):\n"
        b'  File "/usr/lib/python3.11/threading.py", line 324 in wait\n'
        b"\n"
        b"Current thread 0x00007f3c25e0b740 (most recent call first):\n"
        b"  Garbage-collecting\n"
        b'  File "/v/lib/python3.11/site-packages/mxnet/kvstore/kvstore.py", line 240 in push\n'
        b'  File "/v/lib/python3.11/site-packages/mxnet/gluon/trainer.py", line 395 in step\n'
        b'  File "/work/train.py", line 30 in main\n'
        b'  File "/work/train.py", line 52 in <module>\n')


def test_the_main_thread_is_found_among_the_threads_and_the_role_s_own_output_told_apart():
    reader = DumpReader()
    reader.expect(0x7F3C25E0B740, 42)
    assert reader.feed(b"epoch 1 done\n" + DUMP[:100], 1.0)  # the role's own line first
    assert not reader.feed(DUMP[100:], 1.0)
    assert not reader.feed(b'mxbatch hook worker[1]: kvstore {"pid": 42}\n', 1.0)
    assert reader.feed(b"epoch 2\n", 2.0)  # the dump is over
    stack = reader.latest
    assert [f.function for f in stack.frames] == ["push", "step", "main", "<module>"]
    assert stack.pid == 42 and stack.in_kvstore and stack.in_mxnet
    assert stack.describe() == ("in a kvstore call (mxnet/kvstore/kvstore.py:240 in push), "
                                "from train.py:30 in main")
    assert MainStack.parse(stack.to_dict()) == stack


def test_where_a_stack_is_told_from_its_frames():
    ndarray = StackFrame("/v/site-packages/mxnet/ndarray/ndarray.py", 2568, "asnumpy")
    own = StackFrame("/w/train.py", 18, "<module>", "print(loss.asscalar())")
    stack = MainStack((ndarray, own))
    assert stack.in_mxnet and not stack.in_kvstore
    assert stack.describe() == ("in MXNet (mxnet/ndarray/ndarray.py:2568 in asnumpy), from "
                                "train.py:18 in <module> (print(loss.asscalar()))")
    server = MainStack((StackFrame("/v/site-packages/mxnet/kvstore/kvstore_server.py", 74,
                                   "run"),))
    assert not server.in_kvstore and server.describe().startswith("in MXNet (")
    # a server serves from MXNet's import, through the role hook's import gate
    importing = MainStack((
        StackFrame("/v/site-packages/mxnet/kvstore/kvstore_server.py", 83,
                   "_init_kvstore_server_module"),
        StackFrame("/v/site-packages/mxnet/kvstore/kvstore_server.py", 86, "<module>"),
        StackFrame("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed"),
        StackFrame("/run/pyhook/sitecustomize.py", 324, "exec_module"),
        StackFrame("/v/site-packages/mxnet/kvstore/__init__.py", 24, "<module>"),
        StackFrame("/w/train.py", 3, "<module>", "import mxnet as mx")))
    assert not importing.in_kvstore and importing.describe() == (
        "in MXNet (mxnet/kvstore/kvstore_server.py:83 in _init_kvstore_server_module), "
        "from train.py:3 in <module> (import mxnet as mx)")
    # MXNet's fit calling the role's own callback, which sleeps: in its own code
    callback = MainStack((StackFrame("/w/train.py", 9, "on_batch"),
                          StackFrame("/v/site-packages/mxnet/module/base_module.py", 5, "fit")))
    assert not callback.in_mxnet and callback.describe() == "at train.py:9 in on_batch"
    assert MainStack(()).describe() == "in no Python frame"


def _worker(rank: int, batches=None) -> TaskRecord:
    return TaskRecord(role=Role.WORKER, rank=rank, state=TaskState.RUNNING, batches=batches)


def test_different_numbers_of_batches_are_claimed_only_from_two_counts():
    assert diagnosis.batches([_worker(0, 24), _worker(1)]) == ""
    assert diagnosis.batches([_worker(0, 24), _worker(1, 24)]) == (
        "; batches pushed (the most pushes of one kvstore key): 24 each (worker[0], worker[1])")
    assert diagnosis.batches([_worker(0, 24), _worker(1, 26)]).endswith(
        "worker[0] 24, worker[1] 26: the workers ran different numbers of batches")


def test_the_dump_comes_well_before_the_timeouts_that_decide():
    assert dump_after(1800.0, 60.0) == 10.0
    assert dump_after(8.0, None) == 4.0
    assert dump_after(None, None) == 10.0
    assert dump_after(1.0, 0) == 1.0
