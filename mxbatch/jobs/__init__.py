"""The flows of a job over any backend (submit, follow, cancel, list, clean...).

The package is also callable, because its name is the Python API's:
``mxbatch.jobs(state=None, backend=None, last=None)`` is ``mxbatch.api.jobs`` (the
submitted jobs, newest first). Only that call loads the API; nothing of this layer
uses it.
"""

import sys
import types


class _CallablePackage(types.ModuleType):
    """``mxbatch.jobs``: this package, and ``mxbatch.api.jobs`` when called."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        from ..api import jobs as listing  # the API's function of this name

        return listing(*args, **kwargs)  # type: ignore[arg-type]


sys.modules[__name__].__class__ = _CallablePackage
