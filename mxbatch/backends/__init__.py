"""Backend registry: built-ins are imported lazily; others come from the
``mxbatch.backends`` entry-point group (``name = "package.module:Class"``)."""

from __future__ import annotations

import importlib
from typing import Dict, List, Tuple, Type

from ..errors import BackendUnavailable, MxbatchError
from .base import Backend

_BUILTIN: Dict[str, str] = {
    "local": "mxbatch.backends.local:LocalBackend",
    "sge": "mxbatch.backends.sge:SgeBackend",
    "slurm": "mxbatch.backends.slurm:SlurmBackend",
    "yarn": "mxbatch.backends.yarn:YarnBackend",
}
_PLANNED: Tuple[str, ...] = ()


def names() -> List[str]:
    return sorted(set(_BUILTIN) | set(_entry_points()))


def _entry_points() -> Dict[str, str]:
    try:
        from importlib.metadata import entry_points
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    try:
        group = entry_points(group="mxbatch.backends")  # type: ignore[call-arg]
    except TypeError:  # Python < 3.10
        group = entry_points().get("mxbatch.backends", [])  # type: ignore[attr-defined]
    return {ep.name: ep.value for ep in group}


def backend_class(name: str) -> Type[Backend]:
    """The Backend class called ``name``; a usage error listing the valid names otherwise."""
    target = _BUILTIN.get(name) or _entry_points().get(name)
    if target is None:
        if name in _PLANNED:
            raise BackendUnavailable(f"backend {name!r} is not implemented in this version "
                                     f"(available: {', '.join(names())})")
        raise MxbatchError(f"unknown backend {name!r} (available: {', '.join(names())})",
                           exit_code=2)
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)
