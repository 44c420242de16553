"""The agent of one ssh host, reached only through its ssh session (no shared storage).

The submit host runs ``ssh HOST exec env MXBATCH_JOB_ID=<job> PYTHON -S -c BOOTSTRAP``
and writes to the session's stdin, in order:

1. the runtime zipapp, which the bootstrap (``bootstrap.BOOTSTRAP``: the Python 3.0
   command line that reads it, checks the version, and runs it in the same process as
   ``runtime.pyz remote DIR``, ``main`` here) takes from the session, or from a
   connection back to the controller (``bootstrap``'s docstring);
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
from .wire import GPU_SHARES, TYPE_KEY, MessageType

#: how long the agent waits for its setup message
SETUP_TIMEOUT_S = 60.0

#: variables of the submitter's environment that describe its own session, not a job:
#: the remote host's own values stay
SESSION_VARIABLES = ("HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", "DISPLAY", "XAUTHORITY",
                     "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK",
                     "SSH_ORIGINAL_COMMAND")


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
