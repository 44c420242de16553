"""The probe job of ``mxbatch doctor``: a tiny job through the real backend.

``probe_checks`` makes a directory in the rendezvous directory holding a random
nonce and a small role script, and submits a job (``jobs.prepare``/``jobs.submit``,
exactly as ``submit`` does) with 1 scheduler, 1 server and 1 worker, all running
that script with the roles' interpreter: the scheduler listens on its port (as
ps-lite's would), the server waits, the worker reads the nonce from its working
directory (the probe directory), writes it back with its host name into
``reply.json`` there, reports whether it can import MXNet, and prints the reply to
its log. The job is followed with a deadline and cancelled when it passes. The reply
file proves the compute nodes see the rendezvous directory and can run the runtime
and the roles' Python; a backend that ships files instead of sharing storage (YARN)
proves it through the task log. When no task started at all, the check says the
nodes cannot see the run directory and how to fix it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from ..errors import MxbatchError, WaitTimeout
from ..jobs import submit as jobs
from ..jobs.follow import follow
from ..runtime import wire
from ..runtime.roles import Role
from ..runtime.states import TaskState
from ..spec.schema import JobSpec, Resources, RoleSpec
from .checks import Check, failed, passed, skipped

NONCE = "nonce"
REPLY = "reply.json"
SCRIPT = "mxbatch_probe.py"
#: what the worker prints before its reply, so it can be found in a log
REPLY_MARK = "MXBATCH-PROBE-REPLY "
#: the probe tasks' walltime past the deadline (a batch system ends them in any case)
WALLTIME_MARGIN_S = 60.0

_ROLE_SCRIPT = '''\
"""mxbatch doctor's probe role (see mxbatch/probe.py)."""
import json, os, socket, sys, time

role = os.environ["@DMLC_ROLE@"]
deadline = time.time() + float(os.environ["MXBATCH_PROBE_TIMEOUT"])
if role == "scheduler":
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", int(os.environ["@DMLC_PS_ROOT_PORT@"])))
    listener.listen(8)
    listener.settimeout(1.0)
    while time.time() < deadline:
        try:
            listener.accept()[0].close()
        except socket.timeout:
            pass
elif role == "server":
    while time.time() < deadline:
        time.sleep(0.5)
else:
    reply = {"nonce": open("nonce").read().strip(), "host": socket.gethostname(),
             "python": sys.executable, "python_version": sys.version.split()[0]}
    try:
        import mxnet
        reply["mxnet"] = mxnet.__version__
    except Exception as exc:
        reply["mxnet_error"] = "%s: %s" % (type(exc).__name__, exc)
    with open("reply.json.tmp", "w") as handle:
        json.dump(reply, handle)
    os.replace("reply.json.tmp", "reply.json")
    print("MXBATCH-PROBE-REPLY " + json.dumps(reply), flush=True)
'''


def role_interpreters(spec: Optional[JobSpec]) -> List[str]:
    """The Python interpreters the roles' commands start (``python3`` without a spec)."""
    if spec is None:
        return ["python3"]
    found: List[str] = []
    for role in Role:
        program = spec.role(role).command[0]
        if os.path.basename(program).startswith("python") and program not in found:
            found.append(program)
    return found


def probe_spec(spec: JobSpec, workdir: Path, timeout: float, python: str) -> JobSpec:
    """``spec``'s site settings (backend options, rendezvous, network, environment) with
    the probe's roles: one of each, small, ``python`` running the probe script."""
    roles = {role: RoleSpec(role=role, count=1, command=(python, SCRIPT),
                            resources=Resources(walltime_s=timeout + WALLTIME_MARGIN_S),
                            env={"MXBATCH_PROBE_TIMEOUT": str(timeout)})
             for role in Role}
    rendezvous = dataclasses.replace(spec.rendezvous, startup_timeout_s=timeout, grace_s=1.0)
    return dataclasses.replace(spec, name="mxbatch-doctor", workdir=workdir, roles=roles,
                               rendezvous=rendezvous, container=None, core_dumps=False)


def _read_reply(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _reply_from_log(backend, record) -> Optional[dict]:
    try:
        for line in backend.logs(record, Role.WORKER, 0):
            if line.startswith(REPLY_MARK):
                return json.loads(line[len(REPLY_MARK):])
    except (MxbatchError, OSError, ValueError):
        return None
    return None


def probe_checks(spec: JobSpec, backend_name: str, timeout: float) -> List[Check]:
    """Run the probe job; the checks it proves (see the module docstring)."""
    name = "probe job"
    interpreters = role_interpreters(spec)
    python = interpreters[0] if interpreters else "python3"
    base = spec.rendezvous.dir
    workdir = Path(tempfile.mkdtemp(prefix="mxbatch-doctor-", dir=base))
    nonce = secrets.token_hex(16)
    try:
        (workdir / NONCE).write_text(nonce + "\n")
        (workdir / SCRIPT).write_text(_ROLE_SCRIPT.replace("@DMLC_ROLE@", wire.DMLC_ROLE)
                                      .replace("@DMLC_PS_ROOT_PORT@", wire.DMLC_PS_ROOT_PORT))
        backend, request = jobs.prepare(probe_spec(spec, workdir, timeout, python),
                                        backend_name)
        started = time.time()
        try:
            record = jobs.submit(backend, request)
        except MxbatchError as exc:  # refused or could not start: nothing is left of it
            return [failed(name, f"the probe job could not be submitted: {exc.message}",
                           "fix what the backend says above, then run mxbatch doctor "
                           "again")]
        try:
            status = follow(backend, record, stream_logs=False, echo=lambda _: None,
                            timeout=timeout)
        except WaitTimeout:
            backend.cancel(record)
            status = backend.status(record)
            queued = [t.label for t in status.tasks if t.state is TaskState.PENDING]
            why = (f"still queued: {', '.join(queued)}" if queued
                   else f"state {status.state.value}")
            return [failed(name, f"job {record.job_id} did not finish within {timeout:g}s "
                                 f"({why}); cancelled",
                           "if the queue is busy, retry with a longer --probe-timeout; "
                           "else check that the backend options (queue, partition, "
                           "project) name a queue that runs jobs now")]
        elapsed = time.time() - started
        reply = _read_reply(workdir / REPLY)
        shipped = False
        if reply is None:
            reply = _reply_from_log(backend, record)
            shipped = reply is not None
        if reply is None or reply.get("nonce") != nonce:
            return [_diagnose(record, status, base, spec)]
        how = ("the backend shipped the files and the log came back" if shipped
               else f"the node read the nonce from {workdir.parent} and wrote its reply there")
        checks = [passed(name, f"job {record.job_id} ran on {reply.get('host')} in "
                               f"{elapsed:.1f}s: {how}")]
        if not interpreters:
            checks.append(skipped("mxnet on the nodes", "the roles do not start Python"))
        elif "mxnet" in reply:
            checks.append(passed("mxnet on the nodes",
                                 f"{reply.get('python')} on {reply.get('host')} imports "
                                 f"mxnet {reply['mxnet']}"))
        else:
            checks.append(failed("mxnet on the nodes",
                                 f"{reply.get('python')} on {reply.get('host')} cannot import "
                                 f"mxnet: {reply.get('mxnet_error')}",
                                 "install MXNet where the nodes' python3 finds it (a venv on "
                                 "shared storage, on the PATH the job inherits)"))
        return checks
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _diagnose(record, status, base: Path, spec: JobSpec) -> Check:
    from ..spec.paths import config_path

    name = "probe job"
    started = [t for t in status.tasks if t.started_at]
    if not started:
        where = config_path()
        return failed(name, f"job {record.job_id} {status.state.value}: no task of it "
                            f"started (status: "
                            f"{status.tasks[0].note or status.reason or 'nothing'}): the "
                            f"compute nodes cannot see the run directory {record.run_dir}, "
                            f"or cannot run {spec.role(Role.WORKER).command[0]} there",
                      f"put rendezvous.dir on storage every node mounts at the same path "
                      f"(a shared home, /shared...), e.g. `rendezvous: {{dir: "
                      f"/shared/$USER/mxbatch}}` in the job spec or in a profile of "
                      f"{where or 'the config file'}; now it is {base}")
    reason = status.reason or "the worker wrote no reply"
    log = f" (log: {status.log})" if status.log else ""
    return failed(name, f"job {record.job_id} {status.state.value}: {reason}{log}",
                  f"read the probe's logs: mxbatch logs {record.job_id}")
