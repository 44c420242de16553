"""Parsing the job spec: YAML -> the validated dataclasses of ``schema``.

``load(path)`` and ``from_mapping(data, ...)`` return a ``JobSpec`` or raise a
``SpecError`` naming the file, the line and the key (with a "did you mean"
hint for typos). Relative paths resolve against the spec file's folder. Each
``backends.<name>`` block is checked by that backend's options dataclass (built
in or a plugin's), by the fields' real types (``typed``). Nothing here touches
a cluster; the only I/O is reading the spec file and checking that ``workdir``
exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from ..backends import registry
from ..errors import SpecError
from ..runtime.attempts import ON_ALIASES, RESTARTABLE
from ..runtime.roles import Role
from ..runtime.states import EndReason
from .located import KeyPath, Locations, load_located
from .schema import (
    ContainerRuntime,
    ContainerSpec,
    GpuMode,
    JobSpec,
    NetworkSpec,
    RendezvousSpec,
    Resources,
    RestartsSpec,
    RoleSpec,
    default_runs_dir,
)
from .typed import ConversionError, from_data, kind_of
from .units import parse_duration, parse_port_range, parse_size_mib

T = TypeVar("T")

#: the top-level keys of a job spec
SPEC_KEYS = ("name", "backend", "command", "workdir", "env", "inherit_env", "resources",
             "roles", "network", "rendezvous", "container", "backends", "core_dumps",
             "restarts")
#: signals a checkpoint signal may be (what a training script can catch)
CHECKPOINT_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT",
                      "SIGALRM")

def load(path: Path) -> JobSpec:
    """Read and validate the spec file at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the job spec: {exc}", path=path) from None
    return parse(text, path)


def parse(text: str, path: Path) -> JobSpec:
    """Validate spec ``text`` as if read from ``path`` (for names and relative paths)."""
    data, locations = load_located(text, path)
    return from_mapping(data, base_dir=path.resolve().parent, default_name=path.stem,
                        locations=locations, source=path)


def from_mapping(data: Any, *, base_dir: Path, default_name: str = "job",
                 locations: Optional[Locations] = None,
                 source: Optional[Path] = None) -> JobSpec:
    """Validate plain data (as YAML would give) into a ``JobSpec``."""
    locations = locations or Locations(source)
    root = _Section(data, (), locations, "the job spec")
    root.expect(SPEC_KEYS)
    name = root.take("name", _name, default=_safe_name(default_name))
    backend = root.take("backend", _backend_name, default=None)
    command = root.take("command", _command, default=None)
    workdir = root.take("workdir", _path_in(base_dir), default=base_dir)
    env = root.take("env", _env, default={})
    inherit_env = root.take("inherit_env", _bool, default=True)
    resources = root.take("resources", lambda v, p: _resources(v, p, locations, Resources()),
                          default=Resources())
    roles_section = _Section(root.raw("roles", {}), ("roles",), locations, "roles")
    roles = _roles(roles_section, command, resources)
    network = root.take("network", lambda v, p: _network(v, p, locations), default=NetworkSpec())
    rendezvous = root.take("rendezvous", lambda v, p: _rendezvous(v, p, locations, base_dir),
                           default=None) or RendezvousSpec(dir=default_runs_dir())
    container = root.take("container", lambda v, p: _container(v, p, locations), default=None)
    backend_options = root.take("backends", lambda v, p: _backends(v, p, locations),
                                default={})
    core_dumps = root.take("core_dumps", _bool, default=False)
    restarts = root.take("restarts", lambda v, p: _restarts(v, p, locations),
                         default=RestartsSpec())
    root.finish()
    if not workdir.is_dir():
        raise locations.error(("workdir",), f"no such directory: {workdir}")
    return JobSpec(name=name, workdir=workdir, env=env, inherit_env=inherit_env, roles=roles,
                   network=network, rendezvous=rendezvous, backend_options=backend_options,
                   source=source, container=container, core_dumps=core_dumps,
                   locations=locations, backend=backend, restarts=restarts)


def with_max_restarts(spec: JobSpec, max_restarts: Optional[int]) -> JobSpec:
    """The spec with ``--max-restarts`` applied."""
    if max_restarts is None:
        return spec
    if max_restarts < 0:
        raise SpecError(f"must be at least 0, got {max_restarts}", key="--max-restarts")
    return dataclasses.replace(spec, restarts=dataclasses.replace(spec.restarts,
                                                                  max=max_restarts))


def with_counts(spec: JobSpec, workers: Optional[int] = None,
                servers: Optional[int] = None) -> JobSpec:
    """The spec with CLI count overrides (``-n``/``-s``) applied and checked."""
    roles = dict(spec.roles)
    for role, count, minimum in ((Role.WORKER, workers, 1), (Role.SERVER, servers, 1)):
        if count is None:
            continue
        if count < minimum:
            flag = "-n/--workers" if role is Role.WORKER else "-s/--servers"
            raise SpecError(f"must be at least {minimum}, got {count}", key=flag)
        roles[role] = dataclasses.replace(roles[role], count=count)
    return dataclasses.replace(spec, roles=roles)


# --------------------------------------------------------------------------- sections


class _Section:
    """One mapping of the spec: take known keys, then reject the rest with hints."""

    def __init__(self, data: Any, key_path: KeyPath, locations: Locations, what: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise locations.error(key_path, f"{what} must be a mapping, got {kind_of(data)}")
        self.data = data
        self.key_path = key_path
        self.locations = locations
        self.known: List[str] = []

    def raw(self, key: str, default: Any) -> Any:
        self.known.append(key)
        value = self.data.get(key, default)
        return default if value is None else value

    def take(self, key: str, parse: Callable[[Any, KeyPath], T], default: T) -> T:
        self.known.append(key)
        if key not in self.data or self.data[key] is None:
            return default
        key_path = self.key_path + (key,)
        try:
            return parse(self.data[key], key_path)
        except SpecError:
            raise
        except (ValueError, TypeError) as exc:
            raise self.locations.error(key_path, str(exc)) from None

    def expect(self, keys: Sequence[str]) -> None:
        """Reject unknown keys now, before any value is checked."""
        self.known.extend(keys)
        self.finish()

    def finish(self) -> None:
        for key in self.data:
            if key not in self.known:
                close = difflib.get_close_matches(key, self.known, n=1, cutoff=0.6)
                hint = (f"did you mean {close[0]!r}?" if close
                        else "valid keys: " + ", ".join(self.known))
                raise self.locations.error(self.key_path + (key,), "unknown key", hint)


def _name(value: Any, _: KeyPath) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value):
        raise ValueError("a job name is 1-63 letters, digits, '_', '.', '-' "
                         f"starting with a letter or digit, got {value!r}")
    return value


def _backend_name(value: Any, _: KeyPath) -> str:
    known = registry.names()
    if value not in known:
        close = difflib.get_close_matches(str(value), known, n=1, cutoff=0.5)
        raise ValueError(f"unknown backend {value!r} "
                         + (f"(did you mean {close[0]!r}?)" if close else
                            f"(known backends: {', '.join(known)})"))
    return value


def expand_path(text: str) -> str:
    """``~`` and ``$VAR``/``${VAR}`` of the submitting environment expanded in a path,
    ``$$`` standing for a literal ``$``; ``ValueError`` naming an unset variable."""
    parts = []
    for part in text.split("$$"):
        expanded = os.path.expandvars(part)
        unset = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
        if unset:
            raise ValueError(f"${unset.group(1)} is not set in this environment (in the path "
                             f"{text!r}; write $$ for a literal $)")
        parts.append(expanded)
    return os.path.expanduser("$".join(parts))


def _safe_name(stem: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).lstrip("-_.")[:63]
    return cleaned or "job"


def _command(value: Any, _: KeyPath) -> Tuple[str, ...]:
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command string: {exc}") from None
    elif isinstance(value, list) and all(isinstance(a, (str, int, float)) and
                                         not isinstance(a, bool) for a in value):
        argv = [str(a) for a in value]
    else:
        raise ValueError(f"a command is a string or a list of strings, got {kind_of(value)}")
    if not argv or not argv[0]:
        raise ValueError("the command is empty")
    return tuple(argv)


def _bool(value: Any, _: KeyPath) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _int(minimum: int) -> Callable[[Any, KeyPath], int]:
    def parse(value: Any, _: KeyPath) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {kind_of(value)} {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def _path_in(base_dir: Path) -> Callable[[Any, KeyPath], Path]:
    def parse(value: Any, _: KeyPath) -> Path:
        if not isinstance(value, str) or not value:
            raise ValueError(f"expected a path, got {kind_of(value)}")
        return (base_dir / Path(expand_path(value))).resolve()
    return parse


def _env(value: Any, key_path: KeyPath) -> Dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"env must be a mapping of NAME: value, got {kind_of(value)}")
    env = {}
    for name, item in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
        if isinstance(item, (dict, list)) or item is None:
            raise ValueError(f"{name}: expected a string or number, got {kind_of(item)}")
        env[name] = str(item).lower() if isinstance(item, bool) else str(item)
    return env


def _resources(value: Any, key_path: KeyPath, locations: Locations, base: Resources) -> Resources:
    section = _Section(value, key_path, locations, "resources")

    def size(v: Any, _: KeyPath) -> int:
        return parse_size_mib(v)

    def duration(v: Any, _: KeyPath) -> float:
        return parse_duration(v)

    result = Resources(
        cpus=section.take("cpus", _int(1), base.cpus),
        memory_mib=section.take("memory", size, base.memory_mib),
        gpus=section.take("gpus", _int(0), base.gpus),
        walltime_s=section.take("walltime", duration, base.walltime_s),
    )
    section.finish()
    return result


def _roles(section: _Section, command: Optional[Tuple[str, ...]],
           resources: Resources) -> Dict[Role, RoleSpec]:
    raw = {role: section.raw(role.value, {}) for role in Role}
    section.finish()
    roles: Dict[Role, RoleSpec] = {}
    worker_count = 1
    for role in (Role.WORKER, Role.SERVER, Role.SCHEDULER):
        sub = _Section(raw[role], section.key_path + (role.value,), section.locations,
                       f"roles.{role.value}")
        if role is Role.SCHEDULER:
            count = sub.take("count", _int(1), 1)
            if count != 1:
                raise section.locations.error(sub.key_path + ("count",),
                                              "there is always exactly 1 scheduler")
        else:
            count = sub.take("count", _int(1), worker_count)
        if role is Role.WORKER:
            worker_count = count
        role_command = sub.take("command", _command, command)
        if role_command is None:
            raise section.locations.error(
                ("command",), "missing: set a top-level command (or one for every role)")
        role_resources = sub.take(
            "resources", lambda v, p: _resources(v, p, section.locations, resources), resources)
        role_env = sub.take("env", _env, {})
        sub.finish()
        roles[role] = RoleSpec(role=role, count=count, command=role_command,
                               resources=role_resources, env=role_env)
    return {role: roles[role] for role in Role}


def _network(value: Any, key_path: KeyPath, locations: Locations) -> NetworkSpec:
    section = _Section(value, key_path, locations, "network")

    def interface(v: Any, _: KeyPath) -> str:
        if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", v):
            raise ValueError(f"expected a network interface name like eth0, got {v!r}")
        return v

    iface = section.take("interface", interface, None)
    low, high = section.take("ports", lambda v, _: parse_port_range(v), (9000, 9999))
    section.finish()
    return NetworkSpec(interface=iface, port_low=low, port_high=high)


def _rendezvous(value: Any, key_path: KeyPath, locations: Locations,
                base_dir: Path) -> RendezvousSpec:
    section = _Section(value, key_path, locations, "rendezvous")
    defaults = RendezvousSpec(dir=Path("."))

    def duration(v: Any, _: KeyPath) -> float:
        return parse_duration(v)

    result = RendezvousSpec(
        dir=section.take("dir", _path_in(base_dir), None) or default_runs_dir(),
        startup_timeout_s=section.take("startup_timeout", duration, defaults.startup_timeout_s),
        grace_s=section.take("grace", duration, defaults.grace_s),
        heartbeat_timeout_s=section.take("heartbeat_timeout", duration,
                                         defaults.heartbeat_timeout_s),
        stall_timeout_s=(None if "stall_timeout" in section.data
                         and section.data["stall_timeout"] is None
                         else section.take("stall_timeout", duration, defaults.stall_timeout_s)),
    )
    section.known.append("stall_timeout")
    section.finish()
    return result


def _restarts(value: Any, key_path: KeyPath, locations: Locations) -> RestartsSpec:
    section = _Section(value, key_path, locations, "restarts")
    defaults = RestartsSpec()

    def duration(v: Any, _: KeyPath) -> float:
        return 0.0 if v == 0 and not isinstance(v, bool) else parse_duration(v)

    def reasons(v: Any, _: KeyPath) -> Tuple[EndReason, ...]:
        items = v if isinstance(v, list) else [v]
        allowed = [r.value for r in RESTARTABLE] + list(ON_ALIASES)
        chosen: List[EndReason] = []
        for item in items:
            if not isinstance(item, str) or item not in allowed:
                close = difflib.get_close_matches(str(item), allowed, n=1, cutoff=0.5)
                raise ValueError(f"unknown end reason {item!r}"
                                 + (f" (did you mean {close[0]!r}?)" if close else
                                    f" (reasons: {', '.join(allowed)})"))
            reason = ON_ALIASES.get(item) or EndReason(item)
            if reason not in chosen:
                chosen.append(reason)
        return tuple(chosen)

    def signal_name(v: Any, _: KeyPath) -> str:
        name = v if isinstance(v, str) and v.startswith("SIG") else f"SIG{v}"
        if name not in CHECKPOINT_SIGNALS:
            raise ValueError(f"expected one of {', '.join(CHECKPOINT_SIGNALS)} or null, "
                             f"got {v!r}")
        return name

    checkpoint_signal: Optional[str] = defaults.checkpoint_signal
    if "checkpoint_signal" in section.data and section.data["checkpoint_signal"] is None:
        checkpoint_signal = None
        section.known.append("checkpoint_signal")
    else:
        checkpoint_signal = section.take("checkpoint_signal", signal_name,
                                         defaults.checkpoint_signal)
    result = RestartsSpec(
        max=section.take("max", _int(0), defaults.max),
        on=section.take("on", reasons, defaults.on),
        backoff_s=section.take("backoff", duration, defaults.backoff_s),
        checkpoint_signal=checkpoint_signal,
        checkpoint_grace_s=section.take("checkpoint_grace", duration,
                                        defaults.checkpoint_grace_s),
        checkpoint_lead_s=section.take("checkpoint_lead", duration,
                                       defaults.checkpoint_lead_s),
    )
    section.finish()
    return result


def _container(value: Any, key_path: KeyPath, locations: Locations) -> ContainerSpec:
    section = _Section(value, key_path, locations, "container")

    def choice(enum_class: Any) -> Callable[[Any, KeyPath], Any]:
        def parse(v: Any, _: KeyPath) -> Any:
            choices = [c.value for c in enum_class]
            if v not in choices:
                raise ValueError(f"expected one of {', '.join(choices)}, got {v!r}")
            return enum_class(v)
        return parse

    def image(v: Any, _: KeyPath) -> str:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"expected an image name, got {kind_of(v)}")
        return v

    def strings(v: Any, _: KeyPath) -> Tuple[str, ...]:
        if not isinstance(v, list) or not all(isinstance(i, str) and i for i in v):
            raise ValueError(f"expected a list of strings, got {kind_of(v)}")
        return tuple(v)

    def mounts(v: Any, p: KeyPath) -> Tuple[str, ...]:
        for mount in strings(v, p):
            parts = mount.split(":")
            if len(parts) not in (2, 3) or not all(parts[:2]) or parts[2:] not in ([], ["ro"],
                                                                                     ["rw"]):
                raise ValueError(f"a mount is host-path:container-path[:ro|rw], got {mount!r}")
        return tuple(v)

    result = ContainerSpec(runtime=section.take("runtime", choice(ContainerRuntime),
                                                ContainerRuntime.DOCKER),
                           image=section.take("image", image, ""),
                           mounts=section.take("mounts", mounts, ()),
                           options=section.take("options", strings, ()),
                           gpus=section.take("gpus", choice(GpuMode), GpuMode.AUTO))
    section.finish()
    if not result.image:
        raise locations.error(key_path + ("image",), "missing: the container image to run")
    return result


def _backends(value: Any, key_path: KeyPath, locations: Locations) -> Dict[str, Any]:
    """Each ``backends.<name>`` block as that backend's options dataclass."""
    if not isinstance(value, dict):
        raise ValueError(f"backends must be a mapping of backend name to options, "
                         f"got {kind_of(value)}")
    known = registry.names()
    result = {}
    for name, raw_options in value.items():
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.5)
            raise locations.error(key_path + (name,), "unknown backend",
                                  f"did you mean {close[0]!r}?" if close else
                                  "known backends: " + ", ".join(known))
        result[name] = parse_options(registry.backend_class(name).options_class,
                                     {} if raw_options is None else raw_options,
                                     key_path + (name,), locations)
    return result


def parse_options(options_class: Callable[..., T], data: Any, key_path: KeyPath,
                  locations: Locations) -> T:
    """``data`` (one ``backends.<name>`` block) as ``options_class``, by its fields' types;
    a ``SpecError`` at the offending key otherwise."""
    try:
        return from_data(options_class, data)  # type: ignore[arg-type]
    except ConversionError as exc:
        raise locations.error(key_path + exc.path, exc.problem, exc.hint) from None
