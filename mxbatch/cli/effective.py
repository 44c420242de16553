"""The settings a job would run with, key by key, and where each value came from.

``effective_settings`` flattens a validated ``JobSpec`` (spec merged over the site's
profile, ``config``) into one ``Setting`` per spec key, spelled as in the spec
(``roles.worker.resources.memory``), with the origin of its value: the file and line
that set it, the command-line flag, or ``built-in default``. ``mxbatch config show``
prints them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..backends.registry import options_for
from ..quoting import shell_words
from ..runtime.roles import Role
from ..spec import schema
from ..spec.located import KeyPath, Origin, dotted
from ..spec.schema import JobSpec
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


def _formatted(field: dataclasses.Field, value: Any, owner: Any) -> Any:
    """A field's value as the spec would spell it, by the type its ``spec_field`` shows."""
    shown = field.metadata.get(schema.TYPE) or ""
    if shown.startswith("duration"):
        return short_duration(value)
    if shown == "size":
        return f"{value}M" if value else None
    if shown == "port range":  # ``ports`` sets port_low and port_high
        return f"{owner.port_low}-{owner.port_high}"
    if isinstance(value, Path):
        return str(value)
    if field.name == "command":
        return shell_words(value)
    return to_data(value)


def _walk(obj: Any, prefix: KeyPath, values: Dict[KeyPath, Any]) -> None:
    """Every spec key of dataclass ``obj`` (its fields made with ``spec_field``) into
    ``values``: nested sections key by key, mappings (``env``) name by name."""
    for field in dataclasses.fields(obj):
        if schema.HELP not in field.metadata:
            continue  # not set by a spec key
        key = prefix + (field.metadata.get(schema.KEY) or field.name,)
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value):
            _walk(value, key, values)
        elif isinstance(value, Mapping):
            for name, item in sorted(value.items(), key=lambda kv: str(kv[0])):
                if dataclasses.is_dataclass(item):
                    _walk(item, key + (to_data(name),), values)
                else:
                    values[key + (name,)] = item
        else:
            values[key] = _formatted(field, value, obj)


def _values(spec: JobSpec, backend: str) -> Dict[KeyPath, Any]:
    """Every spec key of ``spec`` with its value as the spec would spell it, from the
    schema's ``spec_field``s (so a new key shows without being listed here)."""
    values: Dict[KeyPath, Any] = {}
    _walk(dataclasses.replace(spec, backend=backend, backend_options={}), (), values)
    if spec.container is None:
        values.pop(("container",), None)
    values = {("backend",): values.pop(("backend",)), **values}
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
