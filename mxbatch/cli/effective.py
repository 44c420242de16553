"""The settings a job would run with, key by key, and where each value came from.

``effective_settings`` flattens a validated ``JobSpec`` (spec merged over the site's
profile, ``config``) into one ``Setting`` per spec key, spelled as in the spec
(``roles.worker.resources.memory``), with the origin of its value: the file and line
that set it, the command-line flag, or ``built-in default``. ``mxbatch config show``
prints them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from ..backends.registry import options_for
from ..quoting import shell_words
from ..runtime.roles import Role
from ..spec.located import KeyPath, Origin, dotted
from ..spec.schema import JobSpec, Resources
from ..spec.typed import to_data

BUILT_IN = "built-in default"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One effective value; ``file``/``line`` when a file set it."""

    key: str
    value: Any
    origin: str
    file: Optional[str] = None
    line: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def short_duration(seconds: Optional[float]) -> Optional[str]:
    """``600`` -> ``10m``, ``5400`` -> ``90m``, ``45`` -> ``45s``; None stays None."""
    if seconds is None:
        return None
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def _resources(resources: Resources) -> Dict[str, Any]:
    return {"cpus": resources.cpus,
            "memory": f"{resources.memory_mib}M" if resources.memory_mib else None,
            "gpus": resources.gpus, "walltime": short_duration(resources.walltime_s)}


def _values(spec: JobSpec, backend: str) -> Dict[KeyPath, Any]:
    """Every spec key of ``spec`` with its value as the spec would spell it."""
    values: Dict[KeyPath, Any] = {("backend",): backend, ("name",): spec.name,
                                  ("workdir",): str(spec.workdir),
                                  ("inherit_env",): spec.inherit_env,
                                  ("core_dumps",): spec.core_dumps}
    for name, value in sorted(spec.env.items()):
        values[("env", name)] = value
    for role in Role:
        role_spec = spec.role(role)
        base = ("roles", role.value)
        values[base + ("count",)] = role_spec.count
        values[base + ("command",)] = shell_words(role_spec.command)
        for key, value in _resources(role_spec.resources).items():
            values[base + ("resources", key)] = value
        for name, value in sorted(role_spec.env.items()):
            values[base + ("env", name)] = value
    network = spec.network
    values[("network", "interface")] = network.interface
    values[("network", "ports")] = f"{network.port_low}-{network.port_high}"
    rendezvous = spec.rendezvous
    values[("rendezvous", "dir")] = str(rendezvous.dir)
    values[("rendezvous", "startup_timeout")] = short_duration(rendezvous.startup_timeout_s)
    values[("rendezvous", "grace")] = short_duration(rendezvous.grace_s)
    values[("rendezvous", "heartbeat_timeout")] = short_duration(
        rendezvous.heartbeat_timeout_s)
    if spec.container is not None:
        for key, value in to_data(spec.container).items():
            values[("container", key)] = value
    blocks = {name: options_for(spec, name) for name in {*spec.backend_options, backend}}
    for name in sorted(blocks):
        for key, value in to_data(blocks[name]).items():
            values[("backends", name, key)] = value
    return values


def _fallbacks(key: KeyPath) -> List[KeyPath]:
    """Where else a value may come from: a role's command and resources default to the
    top-level ones, the server count to the worker count."""
    if key[:1] == ("roles",) and len(key) >= 3:
        rest = key[2:]
        if rest == ("command",):
            return [("command",)]
        if rest[:1] == ("resources",):
            return [("resources",) + rest[1:]]
        if key[1:] == (Role.SERVER.value, "count"):
            return [("roles", Role.WORKER.value, "count")]
    return []


def effective_settings(spec: JobSpec, backend: str,
                       flags: Optional[Dict[KeyPath, str]] = None) -> List[Setting]:
    """Every key of ``spec`` for ``backend`` with its value and origin; ``flags``: the
    keys a command-line flag set, with the flag (``-n/--workers``)."""
    flags = flags or {}
    settings = []
    for key, value in _values(spec, backend).items():
        text, origin = _origin_of(spec, key, flags)
        settings.append(Setting(dotted(key), value, text,
                                str(origin.path) if origin and origin.path else None,
                                origin.line if origin else None))
    return settings


def _origin_of(spec: JobSpec, key: KeyPath, flags: Dict[KeyPath, str]
               ) -> Tuple[str, Optional[Origin]]:
    candidates = [(key, "")] + [(other, f" via {dotted(other)}") for other in _fallbacks(key)]
    for candidate, via in candidates:
        if candidate in flags:
            return f"command line ({flags[candidate]}){via}", None
        origin = spec.locations.origin(candidate, exact=True)
        if origin is not None:
            return origin.describe() + via, origin
    return BUILT_IN, None


def format_settings(settings: List[Setting]) -> str:
    """``key: value  # origin`` lines, aligned."""
    rows = [(f"{s.key}: {yaml_text(s.value)}", s.origin) for s in settings]
    width = max((len(left) for left, _ in rows), default=0)
    return "".join(f"{left:<{width}}  # {origin}\n" for left, origin in rows)


def yaml_text(value: Any) -> str:
    """A plain value as YAML would spell it: ``null``, ``true``, ``[a, b]``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    return str(value)
