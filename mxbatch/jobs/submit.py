"""The submit flow shared by ``submit``, ``launch`` and ``render``:
spec -> backend -> plan -> checks -> render -> submit -> record.

Everything that can fail on bad input fails before anything is created.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Tuple

from ..backends import containers, records, rundir
from ..backends.base import Backend, Request
from ..backends.registry import backend_class, options_for
from ..runtime.roles import Role
from ..spec import plan as planning
from ..spec.parse import SERVERS_FLAG, WORKERS_FLAG, with_counts, with_max_restarts
from ..spec.schema import JobSpec
from . import scripts


def backend_for_spec(spec: JobSpec, name: str) -> Backend:
    """The backend ``name`` configured from the spec's ``backends.<name>`` block
    (its defaults when the spec has none), or its variant for this process's
    environment (``Backend.variant``: inside a Slurm allocation or an SGE parallel job)."""
    return backend_class(name)(options_for(spec, name)).variant(os.environ)


def backend_for_record(record: records.JobRecord) -> Backend:
    """The backend of a submitted job, with the options it was submitted with."""
    return backend_class(record.backend).from_record(record)


def count_flags_of(workers: Optional[int], servers: Optional[int]) -> Dict[Role, str]:
    """The flags (``-n``/``-s``) that set role counts, of those given, for errors."""
    return {role: flag for role, flag, count in ((Role.WORKER, WORKERS_FLAG, workers),
                                                 (Role.SERVER, SERVERS_FLAG, servers))
            if count is not None}


def prepare(spec: JobSpec, backend_name: str, *, workers: Optional[int] = None,
            servers: Optional[int] = None, for_submit: bool = True,
            count_flags: Optional[Mapping[Role, str]] = None,
            max_restarts: Optional[int] = None,
            check_scripts: bool = True) -> Tuple[Backend, Request]:
    """Validate everything and render the submission; creates nothing.
    ``for_submit``: also check that the backend is usable and the run directory creatable,
    and (``check_scripts``: ``--no-check`` not given; and the spec's ``check_script``)
    that the roles' training script exists where the backend's roles see this machine's
    workdir (``jobs.scripts``);
    ``count_flags``: the flags that set role counts, for errors (default: ``-n``/``-s``
    for ``workers``/``servers`` when given); ``max_restarts``: ``--max-restarts`` over the
    spec's ``restarts.max``."""
    spec = with_max_restarts(with_counts(spec, workers=workers, servers=servers),
                             max_restarts)
    backend = backend_for_spec(spec, backend_name)
    backend.check_container(spec)
    if count_flags is None:
        count_flags = count_flags_of(workers, servers)
    job_plan = planning.make(spec, backend_name, loopback_only=backend.loopback_only,
                             abort_poll_s=backend.abort_poll_s,
                             role_containers=backend.role_containers,
                             max_tasks=backend.max_tasks, count_flags=count_flags,
                             signal_ends=backend.signal_ends)
    backend.check(job_plan)
    containers.check_spec(job_plan)
    rundir.check_trusted(job_plan)  # render too: what it shows must not run from there
    if for_submit and check_scripts and spec.check_script and backend.workdir_is_here():
        scripts.check_scripts(spec)
    if for_submit:
        backend.check_environment()
        backend.check_limits(job_plan)
        containers.check_environment(job_plan, remote=not backend.loopback_only)
        rundir.check_writable(job_plan)
    return backend, backend.render(job_plan)


def submit(backend: Backend, request: Request) -> records.JobRecord:
    """Execute the request; its record is saved before anything starts
    (``Backend.submit``)."""
    record = backend.submit(request)
    try:
        backend.started(record)
    except BaseException:
        backend.cancel(record)  # nothing half-done: the job goes, its record says so
        raise
    return record
