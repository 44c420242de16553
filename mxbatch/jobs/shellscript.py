"""``mxbatch render --format shell``: the job as a bash script that starts every role by
hand, with the ``DMLC_*`` variables ps-lite reads, and no mxbatch in the loop.

For people who learn or debug the parameter-server wiring. The script runs every
role on this machine (the local backend's case): the scheduler's address is the one
the runtime would advertise (127.0.0.1, or the spec's ``network.interface``), its port
one the runtime would pick (a free port of ``network.ports``, chosen when the script is
rendered). It starts the scheduler, the servers and the workers in the background,
waits for the workers (a failing worker, scheduler or server stops the job at once, and
so do workers still running a grace period after the scheduler or a server ended), lets
the servers and the scheduler end, stops them after the grace period if they do not, and
exits with the first failing worker's status.

With ``container:`` each role runs in its container by the runtime's own command
(``docker run --rm --init --network host --name ... -e DMLC_ROLE ... IMAGE CMD``, podman
alike, apptainer ``exec``), built by ``runtime.container.run_argv`` as mxbatch's own
(the spec's mounts, GPUs and options), its variables passed by name from the line's
assignments; the teardown also removes the containers by name (killing a ``docker
run`` client leaves its container running).

What it leaves out, on purpose: mxbatch's supervision (heartbeats, startup deadline,
walltime, the exception hook that makes a crashing role exit instead of hanging in
MXNet's exit barrier) and its bookkeeping variables (``MXBATCH_*``).
"""

from __future__ import annotations

import socket
from typing import Dict, List, Mapping, Optional, Tuple

from ..backends import containers
from ..backends.local import LocalBackend
from ..errors import MxbatchError, SpecError
from ..quoting import quote, shell_words
from ..runtime import net, wire
from ..runtime.container import container_name, remove_argv, run_argv
from ..runtime.planfile import RunPlan, TaskInfo
from ..runtime.roles import Role
from ..spec import plan as planning
from ..spec.schema import JobSpec

#: the variables every role shares; exported once at the top of the script
SHARED_VARIABLES = (wire.DMLC_PS_ROOT_URI, wire.DMLC_PS_ROOT_PORT, wire.DMLC_NUM_SERVER,
                    wire.DMLC_NUM_WORKER)
#: what a role keeps when the spec turns environment inheritance off (``env -i``)
KEPT_WITHOUT_INHERITANCE = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM",
                            "TMPDIR")

_HEADER = """\
#!/usr/bin/env bash
# Job {name}: every role started by hand, the way mxbatch's local backend wires them,
# without mxbatch. Written by `mxbatch render --format shell`; run it with bash.
#
# ps-lite (MXNet's parameter server) reads these variables in every role:
#   DMLC_ROLE          scheduler, server or worker
#   DMLC_PS_ROOT_URI   the scheduler's IP address ({address}: {why})
#   DMLC_PS_ROOT_PORT  the scheduler's port ({port}: free in {low}-{high} when this was
#                      written; if it is taken now, render again or change it here)
#   DMLC_NUM_SERVER    how many servers, DMLC_NUM_WORKER how many workers
#   DMLC_NODE_HOST     the address this role advertises to the others
# The scheduler, {servers} server(s) and {workers} worker(s) start in the background; the
# script waits for the workers, then for the servers and the scheduler (stopped after
# {grace}s if they do not end), and exits with the first failing worker's status. A
# worker or a server that fails, or workers still running {grace}s after the scheduler or
# a server ended, stop everything.
set -u
cd {workdir} || exit 1

"""

_SUPERVISION = """
alive() {{  # true while any of the given processes runs
    local pid
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done
    return 1
}}
stop() {{  # SIGTERM, then SIGKILL after {grace}s
    kill -TERM "$@" 2>/dev/null
    local waited=0
    while alive "$@" && [ "$waited" -lt {grace_ticks} ]; do
        sleep 0.5
        waited=$((waited + 1))
    done
    kill -KILL "$@" 2>/dev/null
    wait "$@" 2>/dev/null
    remove_containers
}}
interrupted() {{
    echo "interrupted: stopping every role" >&2
    stop "${{others[@]}}" "${{workers[@]}}"
    exit 130
}}
trap interrupted INT TERM

status=0
pending=("${{workers[@]}}")
running=("${{others[@]}}")
since_other_ended=0   # half-seconds since the scheduler or a server ended by itself
while [ "${{#pending[@]}}" -gt 0 ]; do
    still=()
    for pid in "${{pending[@]}}"; do
        if kill -0 "$pid" 2>/dev/null; then still+=("$pid"); continue; fi
        wait "$pid"
        code=$?
        if [ "$code" -ne 0 ]; then
            echo "worker (pid $pid) exited with status $code: stopping the job" >&2
            status=$code
            break 2
        fi
    done
    pending=("${{still[@]}}")
    [ "${{#pending[@]}}" -eq 0 ] && break
    # ps-lite's scheduler and servers may end as soon as the workers said goodbye, a
    # moment before the workers exit; one that fails, or ends long before, stops the job
    still=()
    for pid in "${{running[@]}}"; do
        if kill -0 "$pid" 2>/dev/null; then still+=("$pid"); continue; fi
        wait "$pid"
        code=$?
        if [ "$code" -ne 0 ]; then
            echo "the scheduler or a server (pid $pid) exited with status $code: stopping" >&2
            status=1
            break 2
        fi
        [ "$since_other_ended" -eq 0 ] && since_other_ended=1
    done
    running=("${{still[@]}}")
    if [ "$since_other_ended" -gt 0 ]; then
        since_other_ended=$((since_other_ended + 1))
        if [ "$since_other_ended" -gt {grace_ticks} ]; then
            echo "the workers did not end {grace}s after the scheduler or a server: stopping" >&2
            status=1
            break
        fi
    fi
    sleep 0.5
done

if [ "$status" -ne 0 ]; then
    stop "${{others[@]}}" "${{workers[@]}}"
    exit "$status"
fi
# Every worker succeeded: the servers and the scheduler end by themselves; wait for them
waited=0
while alive "${{others[@]}}" && [ "$waited" -lt {grace_ticks} ]; do
    sleep 0.5
    waited=$((waited + 1))
done
stop "${{others[@]}}"
echo "every worker succeeded" >&2
exit 0
"""


def scheduler_port(low: int, high: int, bind_ip: str) -> int:
    """A port of ``low..high`` free now, picked as the runtime picks it."""
    port = next(net.candidate_ports(low, high, bind_ip), None)
    if port is None:
        raise MxbatchError(f"no free port in {low}-{high} on {bind_ip}", exit_code=2)
    return port


def render_script(spec: JobSpec, backend: str, port: Optional[int] = None,
                  count_flags: Optional[Mapping[Role, str]] = None) -> str:
    """The bash script for ``spec`` (see the module docstring). Only for jobs whose roles
    all run here: ``backend`` must be ``local``. ``count_flags``: the flags that set role
    counts, for errors."""
    if backend not in ("local", "ssh"):
        raise SpecError(f"--format shell writes a script that runs every role on this "
                        f"machine (local) or on the hosts of a hostfile over ssh; not for "
                        f"{backend!r}", key="--format", hint="add --backend local")
    job = planning.make(spec, backend, loopback_only=backend == "local",
                        max_tasks=LocalBackend.max_tasks, count_flags=count_flags,
                        role_containers=True)
    containers.check_spec(job)
    run = job.run
    if backend == "ssh" and run.container is not None:
        raise SpecError("--format shell runs roles in containers on this machine only; "
                        "on ssh hosts, use `mxbatch submit`", key="--format",
                        hint="add --backend local, or remove container")
    remote = _ssh_placement(job) if backend == "ssh" else None
    try:
        address = (remote[0][1] if remote else
                   net.scheduler_ip(run.interface, run.loopback_only))
    except net.NetworkError as exc:
        raise spec.error(("network", "interface"), str(exc)) from None
    why = ("the scheduler's host, from here" if remote else
           f"the address of {run.interface}" if run.interface
           else "every role runs on this machine")
    if port is None:  # on a remote scheduler's host: the range's first (not checked)
        port = run.port_low if remote else scheduler_port(run.port_low, run.port_high,
                                                          address)
    grace = max(1, int(run.grace_s))
    text = _HEADER.format(name=spec.name, address=address, why=why,
                          port=port, low=run.port_low, high=run.port_high,
                          servers=len(run.tasks_of(Role.SERVER)),
                          workers=len(run.tasks_of(Role.WORKER)), grace=grace,
                          workdir=quote(run.workdir))
    shared = {wire.DMLC_PS_ROOT_URI: address, wire.DMLC_PS_ROOT_PORT: str(port),
              wire.DMLC_NUM_SERVER: str(len(run.tasks_of(Role.SERVER))),
              wire.DMLC_NUM_WORKER: str(len(run.tasks_of(Role.WORKER)))}
    lines: List[str] = [f"export {name}={quote(shared[name])}" for name in SHARED_VARIABLES]
    lines += ["", "others=()   # the scheduler and the servers", "workers=()", ""]
    lines += _removal_lines(run)
    for task in run.tasks:
        if remote:
            ssh, host_ip = remote[task.index]
            lines += _start_lines(task, host_ip, run.inherit_env, _container_argv(run, task),
                                  ssh=ssh, workdir=run.workdir, shared=shared)
        else:
            lines += _start_lines(task, address, run.inherit_env, _container_argv(run, task))
    text += "\n".join(lines) + "\n"
    return text + _SUPERVISION.format(grace=grace, grace_ticks=grace * 2)


def role_environment(task: TaskInfo, address: str) -> Dict[str, str]:
    """The variables set on one role's command line: its own, without mxbatch's
    bookkeeping and without the shared ``DMLC_*`` exported once."""
    env = {name: value for name, value in task.env.items()
           if not name.startswith("MXBATCH_") and name not in SHARED_VARIABLES}
    env[wire.DMLC_NODE_HOST] = address
    return env


def _container_argv(run: RunPlan, task: TaskInfo) -> Optional[List[str]]:
    """The runtime's command that runs ``task`` in its container (None: no container),
    every variable of the role passed by name from the client's environment."""
    if run.container is None:
        return None
    names = list(SHARED_VARIABLES) + sorted(role_environment(task, ""))
    return run_argv(run.container, run.job_id, run.workdir, run.layout, task.role.value,
                    task.rank, task.argv, gpus=task.gpus, core_dumps=run.core_dumps,
                    by_hand=names)


def _removal_lines(run: RunPlan) -> List[str]:
    """``remove_containers``: what the teardown runs after stopping the roles (the
    containers by name: a killed client leaves its container running)."""
    argv = []
    if run.container is not None:
        argv = remove_argv(run.container.runtime,
                           [container_name(run.job_id, t.role.value, t.rank)
                            for t in run.tasks])
    body = f"{shell_words(argv)} >/dev/null 2>&1" if argv else ":"
    return ["remove_containers() {  # the roles' containers, by name", f"    {body}", "}",
            ""]


def _ssh_placement(job: planning.JobPlan) -> List[Tuple[List[str], str]]:
    """For each task, the ssh command (up to the destination) of its host and that
    host's IP address (resolved here: ps-lite binds literal addresses), placed as the
    ssh backend places them. ``-tt``: killing the script's ssh client hangs up the
    role's terminal on its host, which ends it (SIGHUP)."""
    from ..backends.hosts import placement as placing
    from ..backends.hosts.ssh import SshBackend
    from ..backends.registry import options_for

    options = options_for(job.spec, "ssh")
    backend = SshBackend(options)
    found = placing.job_hosts(job, "ssh", options.hosts, options.hostfile)
    where = found.deal(len(job.run.tasks), [t.gpus for t in job.run.tasks])
    config = backend._config(job)
    result = []
    for index in where:
        host = found.hosts[index]
        argv = backend.ssh_base(host, config)
        ip = _host_ip(argv, host.name)
        argv[argv.index("-T")] = "-tt"
        result.append((argv + [host.name], ip))
    return result


def _host_ip(ssh: List[str], name: str) -> str:
    """The IP address of host ``name`` as ssh reaches it (its configuration's
    ``HostName``: ``ssh -G``), resolved here."""
    import subprocess

    try:
        shown = subprocess.run([*ssh, "-G", name], capture_output=True, text=True,
                               timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        shown = ""
    target = next((line.split()[1] for line in shown.splitlines()
                   if line.startswith("hostname ") and len(line.split()) > 1), name)
    try:
        return socket.gethostbyname(target)
    except OSError as exc:
        raise SpecError(f"cannot resolve host {name} ({target}): {exc}",
                        key="--format") from None


def _start_lines(task: TaskInfo, address: str, inherit_env: bool,
                 container_argv: Optional[List[str]] = None,
                 ssh: Optional[List[str]] = None, workdir: str = "",
                 shared: Optional[Mapping[str, str]] = None) -> List[str]:
    env: Mapping[str, str] = role_environment(task, address)
    ordered = dict(sorted(env.items(), key=lambda item: (item[0] != wire.DMLC_ROLE, item[0])))
    assignments = " ".join(f"{name}={quote(value)}" for name, value in ordered.items())
    prefix = ""
    if not inherit_env:
        prefix = "env -i " + " ".join(f'{name}="${{{name}:-}}"'
                                      for name in KEPT_WITHOUT_INHERITANCE) + " "
    group = "workers" if task.role is Role.WORKER else "others"
    command = f"{prefix}{assignments} {shell_words(container_argv or task.argv)}"
    if ssh is not None:  # the host's shell has none of the script's variables
        values = " ".join(f"{name}={quote(value)}" for name, value in (shared or {}).items())
        remote = (f"cd {quote(workdir)} && exec env {values} {assignments} "
                  f"{shell_words(container_argv or task.argv)}")
        command = f"{shell_words(ssh)} {quote(remote)} </dev/null"
    return [f"# {task.label}", f"{command} &", f"{group}+=($!)"]

