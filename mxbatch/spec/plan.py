"""JobSpec -> JobPlan: the job id, run directory and one task per role instance. Pure.

Task order is fixed: the scheduler is task 0, then servers, then workers, each
role ranked from 0. The job's size is checked against its ceiling (the spec's
``max_tasks``, else the backend's) before any task is built, so planning costs what
the tasks planned cost, and a mistyped count (``-n 99999999999``) is a spec error
at once. Every task gets the ``DMLC_*``/``MXBATCH_*`` variables that
are known before the job runs; the runtime adds the scheduler address and the
task's own IP when it starts.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from ..errors import BadInput, SpecError
from ..runtime import wire
from ..runtime.attempts import RestartPlan
from ..runtime.container import ContainerPlan
from ..runtime.leanscheduler import SchedulerStart
from ..runtime.planfile import DEFAULT_ABORT_POLL_S, RunPlan, TaskInfo
from ..runtime.roles import Role
from .schema import JOB_NAME, JobSpec, RoleSpec


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """A spec bound to a backend, with everything decided that can be decided before submit."""

    spec: JobSpec
    backend: str
    run: RunPlan

    @property
    def job_id(self) -> str:
        return self.run.job_id

    @property
    def run_dir(self) -> Path:
        return Path(self.run.run_dir)

    def tasks_of(self, role: Role) -> List[TaskInfo]:
        return self.run.tasks_of(role)


#: the most tasks of a job a backend allows by default (``Backend.max_tasks``); the
#: spec's ``max_tasks`` raises (or lowers) it
DEFAULT_MAX_TASKS = 10_000


def check_size(spec: JobSpec, backend: str, ceiling: int,
               count_flags: Optional[Mapping[Role, str]] = None) -> int:
    """The job's number of tasks, or a ``SpecError`` at the count that makes it exceed
    ``spec.max_tasks`` (default ``ceiling``, the backend's): the flag that set it
    (``count_flags``: role -> ``-n/--workers``), else its key in the spec."""
    counts = {role: spec.role(role).count for role in Role}
    total = sum(counts.values())
    limit = spec.max_tasks if spec.max_tasks is not None else ceiling
    if total <= limit:
        return total
    role = Role.WORKER if counts[Role.WORKER] >= counts[Role.SERVER] else Role.SERVER
    problem = (f"{counts[Role.WORKER]} workers, {counts[Role.SERVER]} servers and the "
               f"scheduler are {total} tasks, more than "
               + (f"max_tasks ({limit})" if spec.max_tasks is not None
                  else f"the {backend} backend's ceiling of {limit} tasks"))
    hint = (f"to allow it, set max_tasks: {total} in the job spec or the site config's "
            "defaults" + ("" if spec.source is not None  # a file: submit, render, doctor
                          else f", or give launch --max-tasks {total}"))
    flag = (count_flags or {}).get(role)
    if flag is not None:
        raise SpecError(problem, key=flag, hint=hint)
    raise spec.error(("roles", role.value, "count"), problem, hint)


#: a job id: the job's name and 8 hex digits (``new_job_id``)
JOB_ID = re.compile(JOB_NAME + r"-[0-9a-f]{8}")


def new_job_id(name: str) -> str:
    """``<name>-<8 hex>``."""
    return f"{name}-{os.urandom(4).hex()}"  # as secrets.token_hex(4)


def check_job_id(text: str) -> str:
    """``text`` if it is a job id (``JOB_ID``), else ``BadInput`` (exit 2): a job id
    names a file of ``$MXBATCH_HOME/jobs``, so nothing else may reach a path."""
    if not JOB_ID.fullmatch(text):
        raise BadInput(f"{text!r} is not a job id (NAME-XXXXXXXX: the job's name and 8 hex "
                       "digits, as submit printed it; `mxbatch list` shows them)")
    return text


def make(spec: JobSpec, backend: str, *, job_id: Optional[str] = None,
         created_at: Optional[float] = None, python: Optional[str] = None,
         loopback_only: bool = False, abort_poll_s: float = DEFAULT_ABORT_POLL_S,
         role_containers: bool = False, max_tasks: int = DEFAULT_MAX_TASKS,
         count_flags: Optional[Mapping[Role, str]] = None,
         signal_ends: Optional[Dict[str, str]] = None) -> JobPlan:
    """Plan ``spec`` for ``backend``. ``loopback_only``: every task runs on this host;
    ``abort_poll_s``: how often supervisors look for the abort record (often on one
    machine, about once a second on shared storage); ``role_containers``: the runtime
    runs every role in the spec's ``container`` (the backend does not do it itself);
    ``max_tasks``: the backend's ceiling and ``count_flags`` the flags that set counts
    (``check_size``, which runs first); ``signal_ends``: what a signal to a supervisor
    means on this backend (signal name -> end reason)."""
    check_size(spec, backend, max_tasks, count_flags)
    job_id = job_id or new_job_id(spec.name)
    counts = {role: spec.role(role).count for role in Role}
    tasks: List[TaskInfo] = []
    for role in Role:
        role_spec = spec.role(role)
        for rank in range(role_spec.count):
            tasks.append(_task(spec, role_spec, rank, len(tasks), job_id, counts))
    run = RunPlan(
        job_id=job_id,
        run_dir=str(spec.rendezvous.dir / job_id),
        workdir=str(spec.workdir),
        python=python or sys.executable,
        created_at=time.time() if created_at is None else created_at,
        inherit_env=spec.inherit_env,
        interface=spec.network.interface,
        loopback_only=loopback_only and spec.network.interface is None,
        port_low=spec.network.port_low,
        port_high=spec.network.port_high,
        startup_timeout_s=spec.rendezvous.startup_timeout_s,
        grace_s=spec.rendezvous.grace_s,
        heartbeat_timeout_s=spec.rendezvous.heartbeat_timeout_s,
        stall_timeout_s=spec.rendezvous.stall_timeout_s,
        exit_timeout_s=spec.rendezvous.exit_timeout_s,
        exit_grace_s=spec.rendezvous.exit_grace_s,
        member_start=spec.rendezvous.member_start,
        abort_poll_s=abort_poll_s,
        submit_path=os.environ.get("PATH") if spec.inherit_env else None,
        core_dumps=spec.core_dumps,
        container=container_plan(spec) if role_containers else None,
        tasks=tasks,
        restarts=restart_plan(spec),
        signal_ends=dict(signal_ends or {}),
    )
    return JobPlan(spec=spec, backend=backend, run=run)


def restart_plan(spec: JobSpec) -> RestartPlan:
    """The spec's ``restarts`` as the runtime reads it."""
    restarts = spec.restarts
    return RestartPlan(max=restarts.max, on=tuple(r.value for r in restarts.on),
                       backoff_s=restarts.backoff_s,
                       checkpoint_signal=restarts.checkpoint_signal,
                       checkpoint_grace_s=restarts.checkpoint_grace_s,
                       checkpoint_lead_s=restarts.checkpoint_lead_s)


def container_plan(spec: JobSpec) -> Optional[ContainerPlan]:
    """The spec's ``container`` as the runtime needs it (None without one)."""
    container = spec.container
    if container is None:
        return None
    return ContainerPlan(runtime=container.runtime, image=container.image,
                         mounts=list(container.mounts), options=list(container.options),
                         gpus=container.gpus)


def _task(spec: JobSpec, role_spec: RoleSpec, rank: int, index: int, job_id: str,
          counts: Dict[Role, int]) -> TaskInfo:
    env: Dict[str, str] = {}
    env.update(spec.env)
    env.update(role_spec.env)
    env.setdefault("OMP_NUM_THREADS", str(role_spec.resources.cpus))
    env.update({
        wire.DMLC_ROLE: role_spec.role.value,
        wire.DMLC_NUM_SERVER: str(counts[Role.SERVER]),
        wire.DMLC_NUM_WORKER: str(counts[Role.WORKER]),
        wire.JOB_ID: job_id,
        wire.ROLE: role_spec.role.value,
        wire.RANK: str(rank),
    })
    if spec.network.interface:
        env[wire.DMLC_INTERFACE] = spec.network.interface
    if role_spec.role is Role.SCHEDULER and spec.rendezvous.scheduler is SchedulerStart.LEAN:
        env[wire.SCHEDULER_START] = SchedulerStart.LEAN.value
    resources = role_spec.resources
    return TaskInfo(index=index, role=role_spec.role, rank=rank,
                    argv=list(role_spec.command), env=env, cpus=resources.cpus,
                    memory_mib=resources.memory_mib, gpus=resources.gpus,
                    walltime_s=resources.walltime_s)
