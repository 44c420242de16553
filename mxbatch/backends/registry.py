"""Which backends exist: the built-ins, imported lazily, and plugins from the
``mxbatch.backends`` entry-point group (``name = "package.module:BackendClass"``).

A plugin's class has the same contract as a built-in (``base.Backend``): its
``options_class`` validates the spec's ``backends.<name>:`` block and its
``handle_class`` what the job record keeps. Importing this module imports no
backend.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Type

from ..errors import MxbatchError, SpecError, SpecErrors, did_you_mean
from ..spec import config as siteconfig
from ..spec.parse import parse_options
from ..spec.schema import JobSpec

if TYPE_CHECKING:  # pragma: no cover
    from .base import Backend

GROUP = "mxbatch.backends"
_BUILTIN: Dict[str, str] = {
    "local": "mxbatch.backends.local:LocalBackend",
    "mpi": "mxbatch.backends.hosts.mpi:MpiBackend",
    "oar": "mxbatch.backends.batch.oar:OarBackend",
    "sge": "mxbatch.backends.batch.sge:SgeBackend",
    "slurm": "mxbatch.backends.batch.slurm:SlurmBackend",
    "ssh": "mxbatch.backends.hosts.ssh:SshBackend",
    "yarn": "mxbatch.backends.yarn.backend:YarnBackend",
}
#: backends a built-in one hands a job to inside an allocation of its system
#: (``Backend.variant``): job records name them, users need not (not in ``names``)
_VARIANTS: Dict[str, str] = {
    "slurm-steps": "mxbatch.backends.hosts.allocation:SlurmStepsBackend",
    "sge-pe": "mxbatch.backends.hosts.allocation:SgePeBackend",
    "sge-gang": "mxbatch.backends.batch.sgegang:SgeGangBackend",
}


def names() -> List[str]:
    """Every backend name, sorted."""
    return sorted(set(_BUILTIN) | set(_plugins()))


def builtin_names() -> List[str]:
    """The names of the backends mxbatch itself ships, sorted."""
    return sorted(_BUILTIN)


def is_known(name: str) -> bool:
    """Whether ``name`` is a backend users may name (``names``), reading the installed
    plugins only when it is no built-in one."""
    return name in _BUILTIN or name in _plugins()


def _plugins() -> Dict[str, str]:
    """The plugins' backends (reading every installed package's entry points: slow,
    so only when a name is not a built-in one)."""
    from importlib.metadata import entry_points

    try:
        group = entry_points(group=GROUP)  # type: ignore[call-arg]
    except TypeError:  # Python 3.9: no selection by group
        group = entry_points().get(GROUP, [])  # type: ignore[attr-defined]
    return {ep.name: ep.value for ep in group}


def unknown_backend_hint(word: str, known: List[str]) -> str:
    """``did you mean 'x'?`` for the closest backend name, else the list of them."""
    return did_you_mean(word, known, "known backends: " + ", ".join(known), cutoff=0.5)


def check_spec_backends(spec: JobSpec) -> None:
    """The spec's ``backend:`` and every ``backends.<name>`` block name a backend that
    exists; a ``SpecError`` at the key otherwise."""
    if spec.backend is not None and not is_known(spec.backend):
        raise spec.locations.error(("backend",), f"unknown backend {spec.backend!r}",
                                   unknown_backend_hint(spec.backend, names()))
    for name in spec.backend_options:
        if not is_known(name):
            raise spec.locations.error(("backends", name), "unknown backend",
                                       unknown_backend_hint(name, names()))


def options_for(spec: JobSpec, name: str) -> Any:
    """Backend ``name``'s options from the spec: every ``backends.<name>`` block present
    is parsed by its backend's ``options_class`` (so a typo in another backend's block
    is an error too, at its file:line:key); the chosen one's options, or its defaults
    when the spec has no block for it."""
    check_spec_backends(spec)
    parsed, problems = {}, []
    for block, data in spec.backend_options.items():
        try:
            parsed[block] = parse_options(backend_class(block).options_class, data,
                                          ("backends", block), spec.locations)
        except SpecError as exc:  # every block's problems, reported together
            problems += exc.errors if isinstance(exc, SpecErrors) else [exc]
    if problems:
        raise SpecErrors.of(problems)
    return parsed[name] if name in parsed else backend_class(name).options_class()


def load_site_config(path: Optional[Path] = None) -> siteconfig.SiteConfig:
    """The site config as ``spec.config.load_config`` reads it, with every profile's and
    the defaults' ``backends:`` blocks checked by their backends (a ``SpecError`` at
    the block's file:line:key, whether or not that profile is used)."""
    site = siteconfig.load_config(path)
    for layer in site.all_layers():
        if layer.alone is not None:
            for name in layer.alone.backend_options:
                options_for(layer.alone, name)
            check_spec_backends(layer.alone)
    return site


def backend_class(name: str) -> "Type[Backend]":
    """The backend class called ``name``; a usage error (exit 2) listing the valid names,
    or naming the plugin that cannot be imported."""
    target = _BUILTIN.get(name) or _VARIANTS.get(name) or _plugins().get(name)
    if target is None:
        raise MxbatchError(f"unknown backend {name!r} ({unknown_backend_hint(name, names())})",
                           exit_code=2)
    module_name, _, class_name = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise MxbatchError(f"backend {name!r} ({target}) cannot be loaded: {exc}",
                           exit_code=3) from None
