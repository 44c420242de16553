"""The Python API: submit and follow mxbatch jobs from Python (notebooks, sweeps,
pipelines). The CLI is built on it: each command presents what these return.

- ``submit(spec, backend=None, overrides=None, env=None, args=()) -> Job``
- ``launch(command, workers=1, servers=None, backend=None, **options) -> Job``
- ``Job(job_id)``: ``status()``, ``wait(timeout)``, ``logs(role, rank, tail, follow)``,
  ``cancel()``, ``id``, ``run_dir``
- ``jobs(state=None, backend=None)``: the submitted jobs, newest first

Also importable as ``mxbatch.submit``, ``mxbatch.Job`` and so on, which load this
package only when first used (``import mxbatch`` stays as light as the CLI's start).
Errors are ``mxbatch.errors``' typed errors (``SpecError``, ``JobNotFound``,
``WaitTimeout``...), each with the CLI's ``exit_code``.
"""

from typing import TYPE_CHECKING, Dict, List

#: each name, and the module of this package that has it: loaded on first use, so that
#: ``mxbatch submit`` (which needs ``load_spec`` only) imports no job status before its
#: first role starts
_MODULES: Dict[str, str] = {"Job": "job", "JobStatus": "job", "jobs": "job",
                            "launch": "submitting", "load_spec": "submitting",
                            "submit": "submitting"}
__all__ = sorted(_MODULES)

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job, JobStatus, jobs  # noqa: F401
    from .submitting import launch, load_spec, submit  # noqa: F401


def __getattr__(name: str) -> object:
    if name in _MODULES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_MODULES))
