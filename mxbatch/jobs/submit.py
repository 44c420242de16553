"""The submit flow shared by ``submit``, ``launch`` and ``render``:
spec -> backend -> plan -> checks -> render -> submit -> record.

Everything that can fail on bad input fails before anything is created.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

from ..backends import containers, records, rundir
from ..backends.base import Backend, Request
from ..backends.registry import backend_class, options_for
from ..spec import plan as planning
from ..spec.parse import with_counts, with_max_restarts
from ..spec.schema import JobSpec


def backend_for_spec(spec: JobSpec, name: str) -> Backend:
    """The backend ``name`` configured from the spec's ``backends.<name>`` block
    (its defaults when the spec has none), or its variant for this process's
    environment (``Backend.variant``: inside a Slurm allocation or an SGE parallel job)."""
    return backend_class(name)(options_for(spec, name)).variant(os.environ)


def backend_for_record(record: records.JobRecord) -> Backend:
    """The backend of a submitted job, with the options it was submitted with."""
    return backend_class(record.backend).from_record(record)


def prepare(spec: JobSpec, backend_name: str, *, workers: Optional[int] = None,
            servers: Optional[int] = None, for_submit: bool = True,
            max_restarts: Optional[int] = None) -> Tuple[Backend, Request]:
    """Validate everything and render the submission; creates nothing.
    ``for_submit``: also check that the backend is usable and the run directory creatable;
    ``max_restarts``: ``--max-restarts`` over the spec's ``restarts.max``."""
    spec = with_max_restarts(with_counts(spec, workers=workers, servers=servers),
                             max_restarts)
    backend = backend_for_spec(spec, backend_name)
    backend.check_container(spec)
    job_plan = planning.make(spec, backend_name, loopback_only=backend.loopback_only,
                             abort_poll_s=backend.abort_poll_s,
                             role_containers=backend.role_containers,
                             signal_ends=backend.signal_ends)
    backend.check(job_plan)
    containers.check_spec(job_plan)
    if for_submit:
        backend.check_environment()
        containers.check_environment(job_plan, remote=not backend.loopback_only)
        rundir.check_writable(job_plan)
    return backend, backend.render(job_plan)


def submit(backend: Backend, request: Request) -> records.JobRecord:
    """Execute the request and save its record."""
    record = backend.submit(request)
    records.save(record)
    try:
        backend.started(record)
    except BaseException:
        backend.cancel(record)  # nothing half-done: the job goes, its record says so
        raise
    return record
