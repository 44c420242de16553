"""Which backends exist: the built-ins, imported lazily, and plugins from the
``mxbatch.backends`` entry-point group (``name = "package.module:BackendClass"``).

A plugin's class has the same contract as a built-in (``base.Backend``): its
``options_class`` validates the spec's ``backends.<name>:`` block and its
``handle_class`` what the job record keeps. Importing this module imports no
backend.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Dict, List, Type

from ..errors import MxbatchError

if TYPE_CHECKING:  # pragma: no cover
    from .base import Backend

GROUP = "mxbatch.backends"
_BUILTIN: Dict[str, str] = {
    "local": "mxbatch.backends.local:LocalBackend",
    "mpi": "mxbatch.backends.hosts.mpi:MpiBackend",
    "sge": "mxbatch.backends.batch.sge:SgeBackend",
    "slurm": "mxbatch.backends.batch.slurm:SlurmBackend",
    "ssh": "mxbatch.backends.hosts.ssh:SshBackend",
    "yarn": "mxbatch.backends.yarn.backend:YarnBackend",
}


def names() -> List[str]:
    """Every backend name, sorted."""
    return sorted(set(_BUILTIN) | set(_plugins()))


def builtin_names() -> List[str]:
    """The names of the backends mxbatch itself ships, sorted."""
    return sorted(_BUILTIN)


def _plugins() -> Dict[str, str]:
    try:
        group = entry_points(group=GROUP)  # type: ignore[call-arg]
    except TypeError:  # Python 3.9: no selection by group
        group = entry_points().get(GROUP, [])  # type: ignore[attr-defined]
    return {ep.name: ep.value for ep in group}


def backend_class(name: str) -> "Type[Backend]":
    """The backend class called ``name``; a usage error (exit 2) listing the valid names,
    or naming the plugin that cannot be imported."""
    target = _BUILTIN.get(name) or _plugins().get(name)
    if target is None:
        close = difflib.get_close_matches(str(name), names(), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"available: {', '.join(names())}"
        raise MxbatchError(f"unknown backend {name!r} ({hint})", exit_code=2)
    module_name, _, class_name = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise MxbatchError(f"backend {name!r} ({target}) cannot be loaded: {exc}",
                           exit_code=3) from None
