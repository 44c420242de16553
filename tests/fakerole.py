"""A stand-in for an MXNet role, for fast tests of the runtime without MXNet.

scheduler: listens on DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT until stopped (like ps-lite's
           scheduler, with SO_REUSEADDR as zmq sets it); with
           $FAKE_SCHEDULER_FAIL_ONCE=<file> the first run exits 1 instead (a port taken
           before it could bind); with $FAKE_SCHEDULER_BIND_AFTER=<file> it binds only
           once that file exists (a test takes the port in between), and exits 1 if the
           bind fails, as ps-lite's scheduler does ("bind failed"); it keeps every
           connection it accepts.
server:    sleeps until stopped.
servers and workers connect to the scheduler (retrying, like ps-lite's zmq) and keep
           the connection, unless $FAKE_NO_CONNECT is set.
worker:    writes {argv, env, core_limit} as JSON to $FAKE_OUT/<rank>.json (if set), runs
           $FAKE_SLEEP seconds, or until the file $FAKE_BARRIER exists (so that many
           workers end at the same moment; only the ranks $FAKE_BARRIER_RANKS lists, "1",
           when it is set), printing a line every $FAKE_TICK seconds if
           set (output: the stall detector sees progress), then exits with $FAKE_EXIT
           (default 0; only on the attempts $FAKE_EXIT_ATTEMPTS lists, "0,2", and by the
           ranks $FAKE_EXIT_RANKS lists, "0", when they are set). On the checkpoint
           signal (SIGUSR1) a worker writes $FAKE_OUT/<rank>.checkpoint (the attempt
           that saved it) and exits 0. The
           worker whose rank is $FAKE_RAISE_RANK raises an exception as soon as the file
           $FAKE_RAISE_ON exists. With $FAKE_SPEED (samples/s by rank,
           comma-separated) each tick prints a Speedometer line instead of "tick" (an
           MXBATCH_METRIC line for the ranks listed in $FAKE_METRIC_RANKS).
$FAKE_HANG_AT_EXIT_RANKS ("0,1"): those workers block in an atexit handler after their
           code has finished, as MXNet's dist kvstore does at exit; $FAKE_BLOCK_RANK: that
           worker blocks for good (no CPU, no output) where it would exit, as a worker
           waiting in a push or pull for a peer that has finished: in a stand-in of
           MXNet's ``KVStore.push`` (its stack dump shows ``mxnet/kvstore/kvstore.py``).
Servers and workers first wait at mxbatch's start gate, as MXNet's import does under
the role hook (``sitecustomize.mxbatch_wait_for_scheduler``).
With $FAKE_JOIN set, servers and workers first connect to the scheduler's address, as
ps-lite's do (retrying for up to 30 s), and say so ("joined IP:PORT").
"""

import atexit
import json
import os
import resource
import signal
import socket
import sys
import threading
import time

role = os.environ["DMLC_ROLE"]

# Like MXNet's import through mxbatch's role hook: a member started before its scheduler
# listens waits here (the start gate) until it does.
try:
    import sitecustomize
except ImportError:
    sitecustomize = None
if hasattr(sitecustomize, "mxbatch_wait_for_scheduler"):
    sitecustomize.mxbatch_wait_for_scheduler()


def _connect_to_scheduler():
    """Like ps-lite's van: connect to the scheduler (retrying until it listens), keep it."""
    address = (os.environ["DMLC_PS_ROOT_URI"], int(os.environ["DMLC_PS_ROOT_PORT"]))
    while True:
        try:
            held = socket.create_connection(address, timeout=2)
        except OSError:
            time.sleep(0.1)
            continue
        _CONNECTIONS.append(held)
        return


_CONNECTIONS = []
# MXNet's kvstore push, as a stack dump shows it (the file name is its code's own), for a
# worker that blocks in a push for a peer that has finished ($FAKE_BLOCK_RANK)
STAND_IN_KVSTORE = {}
exec(compile("import threading\n\ndef push(key, value):\n    threading.Event().wait()\n",
             "/stand-in/site-packages/mxnet/kvstore/kvstore.py", "exec"), STAND_IN_KVSTORE)
if role != "scheduler" and not os.environ.get("FAKE_NO_CONNECT"):
    threading.Thread(target=_connect_to_scheduler, daemon=True).start()

address = (os.environ.get("DMLC_PS_ROOT_URI", ""), int(os.environ.get("DMLC_PS_ROOT_PORT") or 0))
if role != "scheduler" and os.environ.get("FAKE_JOIN"):
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(address, timeout=1).close()
            print("joined %s:%d" % address, flush=True)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)
if role == "scheduler":
    fail_once = os.environ.get("FAKE_SCHEDULER_FAIL_ONCE")
    if fail_once and not os.path.exists(fail_once):  # "port taken": die before listening
        open(fail_once, "w").close()
        sys.exit(1)
    bind_after = os.environ.get("FAKE_SCHEDULER_BIND_AFTER")
    deadline = time.time() + 120
    while bind_after and not os.path.exists(bind_after) and time.time() < deadline:
        time.sleep(0.05)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as exc:
        sys.exit("bind failed: %s" % exc)
    listener.listen(16)
    while True:
        connection, _ = listener.accept()
        _CONNECTIONS.append(connection)
elif role == "server":
    while True:
        time.sleep(1)
else:
    out = os.environ.get("FAKE_OUT")

    def _checkpoint(signum, frame):
        if out:
            with open(os.path.join(out, os.environ["MXBATCH_RANK"] + ".checkpoint"), "w") as h:
                h.write(os.environ.get("MXBATCH_ATTEMPT", ""))
        sys.exit(0)

    signal.signal(signal.SIGUSR1, _checkpoint)
    if out:
        with open(os.path.join(out, os.environ["MXBATCH_RANK"] + ".json"), "w") as handle:
            json.dump({"argv": sys.argv[1:], "env": dict(os.environ),
                       "core_limit": resource.getrlimit(resource.RLIMIT_CORE)}, handle)
    rank = int(os.environ["MXBATCH_RANK"])
    speeds = [s for s in os.environ.get("FAKE_SPEED", "").split(",") if s]
    explicit = os.environ.get("FAKE_METRIC_RANKS", "").split(",")

    def speed_line():
        if not speeds:
            return None
        speed = speeds[rank % len(speeds)]
        if str(rank) in explicit:
            return "MXBATCH_METRIC samples_per_sec=%s loss=0.25" % speed
        return "INFO:root:Epoch[0] Batch [20]\tSpeed: %s samples/sec\taccuracy=0.5" % speed

    barrier = os.environ.get("FAKE_BARRIER")
    if os.environ.get("FAKE_BARRIER_RANKS") and str(rank) not in \
            os.environ["FAKE_BARRIER_RANKS"].split(","):
        barrier = None
    tick = float(os.environ.get("FAKE_TICK") or 0)
    raise_on = (os.environ.get("FAKE_RAISE_ON")
                if os.environ.get("FAKE_RAISE_RANK") == os.environ["MXBATCH_RANK"] else None)
    end = time.time() + float(os.environ.get("FAKE_SLEEP", 0))
    next_tick = time.time()
    while (time.time() < end if not barrier else not os.path.exists(barrier)):
        if raise_on and os.path.exists(raise_on):
            raise RuntimeError("simulated failure of worker rank %s" % os.environ["MXBATCH_RANK"])
        if tick and time.time() >= next_tick:
            print(speed_line() or "tick", flush=True)
            next_tick += tick
        time.sleep(min(0.05, max(0.0, end - time.time())) if not barrier else 0.05)
    if str(rank) in os.environ.get("FAKE_HANG_AT_EXIT_RANKS", "").split(","):
        atexit.register(threading.Event().wait)
    if os.environ.get("FAKE_BLOCK_RANK") == str(rank):
        STAND_IN_KVSTORE["push"](3, None)
    attempts = os.environ.get("FAKE_EXIT_ATTEMPTS")
    ranks = os.environ.get("FAKE_EXIT_RANKS")
    failing = ((attempts is None or os.environ.get("MXBATCH_ATTEMPT", "0") in attempts.split(","))
               and (ranks is None or os.environ["MXBATCH_RANK"] in ranks.split(",")))
    sys.exit(int(os.environ.get("FAKE_EXIT", 0)) if failing else 0)
