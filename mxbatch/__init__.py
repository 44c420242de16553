"""mxbatch: run Apache MXNet parameter-server training on the systems you already have.

Importing this package has no side effects and pulls in no heavy dependency
(mxnet, drmaa, skein are imported lazily by the code that needs them, and click by the
command line). The Python API (``mxbatch.submit``, ``launch``, ``Job``, ``JobStatus``,
``jobs``: see ``mxbatch.api``) loads when one of its names is first used.
"""

__version__ = "0.1.0"

#: the API's names, each loaded from ``mxbatch.api`` on first use (``__getattr__``)
API_NAMES = ("Job", "JobStatus", "jobs", "launch", "submit")

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:  # pragma: no cover
    from .api import Job, JobStatus, jobs, launch, submit  # noqa: F401


def __getattr__(name: str) -> object:
    if name in API_NAMES:
        from . import api

        if name == "jobs":  # the package mxbatch.jobs, now imported: callable as api.jobs
            return globals()[name]
        return getattr(api, name)
    raise AttributeError(f"module 'mxbatch' has no attribute {name!r}")


def __dir__() -> "list[str]":
    return sorted(set(globals()) | set(API_NAMES))
