"""``cli.output``: an attached command's writes never raise nor block the caller, a
broken or full stdout is lost once and quietly, closed standard streams are /dev/null.
Each case runs in a child process with real pipes and descriptors."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time

#: a child that writes through a Terminal: $LINES lines of $WIDTH bytes, then reports
#: on stderr how long the writes took and whether it was busy, waits until everything
#: is written, and reports what it lost
CHILD = textwrap.dedent(r"""
    import os, sys, time
    from mxbatch.cli.output import Stream, Terminal, open_standard_streams
    open_standard_streams()
    lost = []
    out = Terminal()
    out.tell(lost.append)
    start = time.monotonic()
    busy = False
    for i in range(int(os.environ["LINES"])):
        out.echo(str(i).rjust(int(os.environ["WIDTH"]), "x"))
        busy = busy or out.busy
    sys.stderr.write("took=%.3f busy=%s\n" % (time.monotonic() - start, busy))
    sys.stderr.flush()
    out.drain()
    sys.stderr.write("lost=%s\n" % [loss.describe() for loss in lost])
""")


def _child(env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD], stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, **env), **kwargs)


def test_a_broken_pipe_is_lost_once_and_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader has gone (| head)
    proc = _child({"LINES": "50", "WIDTH": "10"}, stdout=write)
    os.close(write)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "lost=['cannot write to stdout (broken pipe: its reader has gone)']" in err, err
    assert "Exception ignored" not in err and "Traceback" not in err, err


def test_a_full_device_is_lost_and_a_closed_stdout_is_devnull():
    with open("/dev/full", "w") as full:
        proc = _child({"LINES": "5", "WIDTH": "10"}, stdout=full)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "No space left on device" in err, err
    closed = subprocess.run(["bash", "-c", f"{sys.executable} -c {shlex.quote(CHILD)} >&-"],
                            capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, LINES="5", WIDTH="10"))
    assert closed.returncode == 0 and "lost=[]" in closed.stderr, closed.stderr


def test_a_reader_that_does_not_read_blocks_only_the_writer():
    read, write = os.pipe()  # nobody reads until the child has queued everything
    proc = _child({"LINES": "2000", "WIDTH": "499"}, stdout=write)  # 1 MB: 16 pipes
    os.close(write)
    line = proc.stderr.readline()  # the writes returned while the pipe was full
    assert "busy=True" in line, line
    assert float(line.split("took=")[1].split()[0]) < 10, line
    time.sleep(0.5)
    assert proc.poll() is None  # drain waits until everything is written
    received = b""
    with os.fdopen(read, "rb") as reader:
        while chunk := reader.read(65536):
            received += chunk
    assert proc.wait(timeout=60) == 0
    assert received.count(b"\n") == 2000
    assert proc.stderr.read() == "lost=[]\n"
