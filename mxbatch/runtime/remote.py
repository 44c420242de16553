"""The agent of one ssh host, reached only through its ssh session (no shared storage).

The submit host runs ``ssh HOST exec env MXBATCH_JOB_ID=<job> python3 -S -c BOOTSTRAP``
and writes to the session's stdin, in order:

1. 16 ASCII digits: the size of the runtime zipapp, then its bytes. ``BOOTSTRAP``
   (Python 3.0 syntax, so that an old ``python3`` can still say what is wrong) checks
   the version (exit ``VERSION_EXIT`` below 3.8), writes the zipapp into a new private
   directory (``mkdtemp``, mode 0700) and runs it in the same process, as
   ``runtime.pyz remote DIR`` would (``main`` here: no second interpreter start), which
   speaks ``channel`` messages on the same stdin and stdout. ``python3 -S``: the
   runtime needs the standard library only, so the interpreter skips ``site`` (its
   ``.pth`` files may import whole packages); the bootstrap drops ``-c``'s current
   directory from ``sys.path`` before importing anything, so that no file in the
   login directory stands in for a standard module;
2. ``{"t": "setup", "plan": PLAN_JSON, "env": ENV, "tasks": [I, ...], "host": NAME,
   "check_workdir": BOOL, "make_dirs": [...], "attempt": K, "restart_reason": R}``:
   the plan (``run_dir`` becomes DIR; its deadlines the attempt's),
   the submitter's environment (it never appears on a command line), this host's
   task indexes. The agent creates ``make_dirs`` (a sync destination), checks the
   working directory if asked, and, started with ``GPU_SHARES`` (an srun step that
   asked for its tasks' GPUs), that its own ``CUDA_VISIBLE_DEVICES`` holds the GPUs
   its tasks ask for (each role gets its share: ``environ.device_shares``); it answers
   ``{"t": "hello", ...}`` (Python version, host name, pid) or ``{"t": "error",
   "message": ...}``;
3. ``{"t": "start"}`` as soon as this host is ready (its hello; with a sync
   destination, once rsync has copied the working directory here), whatever the other
   hosts' state (else ``{"t": "quit"}``, or end of file: another host failed first):
   the agent supervises its tasks (``agent.Agent``) with a
   ``channelrdv.ChannelRendezvous``, then says ``{"t": "bye", "code": N}``. Should
   another host fail its check later, the controller writes the job's abort, which
   this agent reads as any abort: it stops its roles and ends.

**Connecting back.** With two arguments, ``python3 -S -c BOOTSTRAP ADDRESS PORT``, the
bootstrap first reads a ``TOKEN_BYTES`` token from stdin, connects to ``ADDRESS:PORT``
(the controller), sends the token, and makes that connection its stdin and stdout: all
of the above then goes over TCP. For starters whose stdio is no reliable byte stream:
SGE's builtin ``qrsh -inherit`` drops stdin data when its sending buffer is full (its
client's ``tty_to_commlib`` loop: "couldn't write all data", left as a TODO), which
lost parts of the zipapp on a loaded test cell.

The directory is removed when the agent ends. Anything the runtime prints goes to
stderr (fd 1 is pointed there once the channel has its own copy of it).
"""

import dataclasses
import os
import shutil
import socket
import sys
import time
from typing import Dict, List, Mapping, Optional, Tuple

from .agent import Agent
from .channel import Channel, ChannelClosed, Message
from .channelrdv import ChannelRendezvous
from .environ import device_shares, visible_devices
from .planfile import RunPlan, TaskInfo
from .wire import GPU_SHARES, JOB_ID, TYPE_KEY, MessageType

#: the bootstrap's exit status when the remote python3 is older than 3.8
VERSION_EXIT = 97
#: the width of the zipapp's size before its bytes
SIZE_DIGITS = 16
#: how long the agent waits for its setup message
SETUP_TIMEOUT_S = 60.0
#: the size of the token a connecting-back agent reads from stdin and sends first
TOKEN_BYTES = 32

BOOTSTRAP = r"""
import os, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
if sys.version_info < (3, 8):
    sys.stderr.write("mxbatch: %s is Python %d.%d; mxbatch needs Python 3.8 or newer\n"
                     % (sys.executable, sys.version_info[0], sys.version_info[1]))
    sys.exit(97)
import tempfile
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
if len(sys.argv) == 3:
    import socket
    token = read(@TOKEN_BYTES@)
    sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), 60)
    sock.settimeout(None)
    sock.sendall(token)
    os.dup2(sock.fileno(), 0)
    os.dup2(sock.fileno(), 1)
size = int(read(16))
path = tempfile.mkdtemp(prefix="mxbatch-%s-" % os.environ.get("@JOB_ID@", "job"))
with open(os.path.join(path, "runtime.pyz"), "wb") as out:
    out.write(read(size))
pyz = os.path.join(path, "runtime.pyz")
sys.argv = [pyz, "remote", path]
import runpy
runpy.run_path(pyz, run_name="__main__")
""".strip().replace("@JOB_ID@", JOB_ID).replace("@TOKEN_BYTES@", str(TOKEN_BYTES))

#: variables of the submitter's environment that describe its own session, not a job:
#: the remote host's own values stay
SESSION_VARIABLES = ("HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", "DISPLAY", "XAUTHORITY",
                     "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK",
                     "SSH_ORIGINAL_COMMAND")


def zipapp_header(size: int) -> bytes:
    """What precedes the zipapp's bytes on the channel."""
    return b"%0*d" % (SIZE_DIGITS, size)


def merged_environment(own: Mapping[str, str], submitted: Mapping[str, str]) -> Dict[str, str]:
    """This host's environment with the submitter's on top, except its session variables."""
    env = dict(own)
    env.update({k: v for k, v in submitted.items() if k not in SESSION_VARIABLES})
    return env


def _detach_stdio() -> Channel:
    """The channel on copies of fds 0 and 1; fd 0 becomes /dev/null, fd 1 stderr."""
    channel = Channel(os.dup(0), os.dup(1))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return channel


def _prepare(setup: Message, plan: RunPlan) -> List[str]:
    """Problems that keep this host from running its tasks (none: ready)."""
    problems = []
    for path in setup.get("make_dirs") or []:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            problems.append("cannot create %s: %s" % (path, exc.strerror or exc))
    if setup.get("check_workdir") and not os.path.isdir(plan.workdir):
        problems.append("the working directory %s does not exist on this host (no shared "
                        "storage? copy it there with --sync-dst-dir / backends.ssh."
                        "sync_dst_dir)" % plan.workdir)
    return problems


def gpu_shares(own: Mapping[str, str], tasks: List[TaskInfo]
               ) -> Tuple[Optional[Dict[int, str]], Optional[str]]:
    """Each task's own devices (by task index) when this agent was started to share its
    GPUs out (``GPU_SHARES`` in ``own``, this process's environment: its srun step's,
    before the submitter's is laid over it), else None; or why it cannot."""
    if not own.get(GPU_SHARES):
        return None, None
    try:
        shares = device_shares(visible_devices(own) or [], [t.gpus for t in tasks])
    except ValueError as exc:
        return None, "this host's agent cannot give its roles their GPUs: %s" % exc
    return {t.index: share for t, share in zip(tasks, shares)}, None


def main(run_dir: str) -> int:
    """Run this host's agent over stdin/stdout (see the module docstring)."""
    channel = _detach_stdio()
    try:
        return _serve(channel, run_dir)
    except ChannelClosed:
        return 1  # the submit host went away before the job started: nothing ran
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _serve(channel: Channel, run_dir: str) -> int:
    setup = channel.wait_message(time.monotonic() + SETUP_TIMEOUT_S)
    if setup.get(TYPE_KEY) != MessageType.SETUP:
        raise ChannelClosed("expected the setup message, got %r" % setup.get(TYPE_KEY))
    plan = dataclasses.replace(RunPlan.from_json(setup["plan"]), run_dir=run_dir)
    tasks = [plan.tasks[i] for i in setup["tasks"]]
    devices, no_devices = gpu_shares(os.environ, tasks)
    problems = _prepare(setup, plan) + ([no_devices] if no_devices else [])
    if problems:
        channel.send({TYPE_KEY: MessageType.ERROR, "message": "; ".join(problems)})
        channel.flush_until(time.monotonic() + 10)
        return 2
    channel.send({TYPE_KEY: MessageType.HELLO, "python": "%d.%d.%d" % sys.version_info[:3],
                  "hostname": socket.gethostname(), "pid": os.getpid()})
    channel.flush_until(time.monotonic() + 30)
    go = channel.wait_message(time.monotonic() + max(10.0, plan.startup_deadline - time.time()))
    if go.get(TYPE_KEY) != MessageType.START:
        return 0
    env = merged_environment(os.environ, setup.get("env") or {})
    where = "the agent on %s" % setup.get("host", socket.gethostname())
    rdv = ChannelRendezvous(channel, reply_timeout_s=plan.heartbeat_timeout_s, where=where)
    agent = Agent(plan, tasks, rdv, environ=env, signals_cancel=False,
                  attempt=int(setup.get("attempt") or 0),
                  restart_reason=str(setup.get("restart_reason") or ""), devices=devices)
    code = agent.run()
    rdv.close(code)
    return code
