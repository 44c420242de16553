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
import errno
import os
import re
import shlex
import typing
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

from ..errors import SpecError, SpecErrors, did_you_mean
from ..runtime.attempts import ON_ALIASES, RESTARTABLE
from ..runtime.roles import Role
from ..runtime.states import EndReason
from . import inputfile, schema
from .located import KeyPath, Locations, load_located
from .schema import (
    ContainerRuntime,
    ContainerSpec,
    GpuMode,
    JobSpec,
    MemberStart,
    NetworkSpec,
    RendezvousSpec,
    Resources,
    RestartsSpec,
    RoleSpec,
    SchedulerStart,
    default_runs_dir,
)
from .typed import ConversionError, from_data, kind_of
from .units import parse_duration, parse_port_range, parse_size_mib

T = TypeVar("T")

#: what a backend's name may be (its registry decides which names exist)
BACKEND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")

#: the top-level keys of a job spec
SPEC_KEYS = ("name", "backend", "command", "workdir", "env", "inherit_env", "resources",
             "roles", "network", "rendezvous", "container", "backends", "core_dumps",
             "check_script", "max_tasks", "restarts")
#: signals a checkpoint signal may be (what a training script can catch)
CHECKPOINT_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT",
                      "SIGALRM")

def load(path: Path) -> JobSpec:
    """Read and validate the spec file at ``path``."""
    path = Path(path)
    return parse(inputfile.read_text(path, "the job spec") or "", path)


def parse(text: str, path: Path) -> JobSpec:
    """Validate spec ``text`` as if read from ``path`` (for names and relative paths)."""
    data, locations = load_located(text, path)
    return from_mapping(data, base_dir=path.resolve().parent, default_name=path.stem,
                        locations=locations, source=path)


def from_mapping(data: Any, *, base_dir: Path, default_name: str = "job",
                 locations: Optional[Locations] = None,
                 source: Optional[Path] = None) -> JobSpec:
    """Validate plain data (as YAML would give) into a ``JobSpec``. Every problem found
    is reported at once (``SpecErrors``, sorted by line), not only the first."""
    locations = locations or Locations(source)
    errors = _Errors()
    root = _Section(data, (), locations, "the job spec", errors)
    errors.raise_any()  # not a mapping: nothing more to check
    root.expect(SPEC_KEYS)
    name = root.take("name", _name, default=_safe_name(default_name))
    backend = root.take("backend", _backend_name, default=None)
    command = root.take("command", _command, default=None)
    workdir = root.take("workdir", _path_in(base_dir), default=base_dir)
    env = root.take("env", _env, default={})
    inherit_env = root.take("inherit_env", _bool, default=True)
    resources = root.take("resources",
                          lambda v, p: _resources(v, p, locations, Resources(), errors),
                          default=Resources())
    roles_section = _Section(root.raw("roles", {}), ("roles",), locations, "roles", errors)
    roles = _roles(roles_section, command, resources, command_failed="command" in root.failed)
    network = root.take("network", lambda v, p: _network(v, p, locations, errors),
                        default=NetworkSpec())
    rendezvous = root.take("rendezvous",
                           lambda v, p: _rendezvous(v, p, locations, base_dir, errors),
                           default=None) or RendezvousSpec(dir=default_runs_dir())
    container = root.take("container", lambda v, p: _container(v, p, locations, errors),
                          default=None)
    backend_options = root.take("backends", lambda v, p: _backends(v, p, locations, errors),
                                default={})
    core_dumps = root.take("core_dumps", _bool, default=False)
    check_script = root.take("check_script", _bool, default=True)
    max_tasks = root.take("max_tasks", _int(1), default=None)
    restarts = root.take("restarts", lambda v, p: _restarts(v, p, locations, errors),
                         default=RestartsSpec())
    root.finish()
    if "workdir" not in root.failed and not workdir.is_dir():
        errors.add(locations.error(("workdir",), f"no such directory: {workdir}"))
    errors.raise_any()
    return JobSpec(name=name, workdir=workdir, env=env, inherit_env=inherit_env, roles=roles,
                   network=network, rendezvous=rendezvous, backend_options=backend_options,
                   source=source, container=container, core_dumps=core_dumps,
                   check_script=check_script,
                   max_tasks=max_tasks, locations=locations, backend=backend,
                   restarts=restarts)


#: the flags of ``submit``, ``render``, ``config show`` that override role counts
WORKERS_FLAG, SERVERS_FLAG = "-n/--workers", "-s/--servers"


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
            flag = WORKERS_FLAG if role is Role.WORKER else SERVERS_FLAG
            raise SpecError(f"must be at least {minimum}, got {count}", key=flag)
        roles[role] = dataclasses.replace(roles[role], count=count)
    return dataclasses.replace(spec, roles=roles)


def with_overrides(spec: JobSpec, *, name: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None,
                   extra_args: Sequence[str] = ()) -> JobSpec:
    """The spec with command-line overrides: the job ``name`` (``--name``), variables
    for every role over the spec's (``--env``), and ``extra_args`` appended to every
    role's command (``submit SPEC -- ARGS``)."""
    changes: Dict[str, Any] = {}
    if name is not None:
        try:
            changes["name"] = _name(name, ())
        except ValueError as exc:
            raise SpecError(str(exc), key="--name") from None
    if env:
        changes["env"] = dict(spec.env, **env)
    if extra_args:
        changes["roles"] = {role: dataclasses.replace(role_spec, command=tuple(
            role_spec.command) + tuple(extra_args)) for role, role_spec in spec.roles.items()}
    return dataclasses.replace(spec, **changes) if changes else spec


# --------------------------------------------------------------------------- sections


class _Errors:
    """The problems found so far in one spec; ``raise_any`` reports them together."""

    def __init__(self) -> None:
        self.found: List[SpecError] = []

    def add(self, error: SpecError) -> None:
        if isinstance(error, SpecErrors):
            self.found.extend(error.errors)
        else:
            self.found.append(error)

    def raise_any(self) -> None:
        if self.found:
            raise SpecErrors.of(self.found)


class _Section:
    """One mapping of the spec: take known keys, then reject the rest with hints. A bad
    value or key is recorded in ``errors`` (the key's default stands in for it, and its
    name joins ``failed``), so that one run reports every problem."""

    def __init__(self, data: Any, key_path: KeyPath, locations: Locations, what: str,
                 errors: _Errors) -> None:
        self.key_path = key_path
        self.locations = locations
        self.errors = errors
        self.known: List[str] = []
        self.failed: Set[str] = set()
        self._reported: Set[str] = set()
        if data is None:
            data = {}
        if not isinstance(data, dict):
            errors.add(locations.error(key_path, f"{what} must be a mapping, got "
                                                 f"{kind_of(data)}"))
            data = {}
        self.data = data

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
        except SpecError as exc:
            self.errors.add(exc)
        except (ValueError, TypeError) as exc:
            self.errors.add(self.locations.error(key_path, str(exc)))
        self.failed.add(key)
        return default

    def error(self, key: str, problem: str) -> None:
        """Record a problem of ``key``'s value found after taking it."""
        self.errors.add(self.locations.error(self.key_path + (key,), problem))
        self.failed.add(key)

    def expect(self, keys: Sequence[str]) -> None:
        """Reject unknown keys now, before any value is checked."""
        self.known.extend(keys)
        self.finish()

    def finish(self) -> None:
        for key in self.data:
            if key not in self.known and key not in self._reported:
                self._reported.add(key)  # once, though finish runs again
                self.errors.add(self.locations.error(self.key_path + (key,), "unknown key",
                                                     unknown_key_hint(self.key_path, key,
                                                                      self.known,
                                                                      self.data[key])))


#: keys people write for a spec key of another name and place
MISPLACED_ALIASES = {"workers": "roles.worker.count", "num_workers": "roles.worker.count",
                     "num-workers": "roles.worker.count", "servers": "roles.server.count",
                     "num_servers": "roles.server.count", "num-servers": "roles.server.count",
                     "hosts_file": "backends.ssh.hostfile", "launcher": "backend"}
_ROLE = "<role>"
#: the role a role's key given outside ``roles`` is pointed to (``count`` ->
#: ``roles.worker.count``): the role people mean most
DEFAULT_HINT_ROLE = Role.WORKER.value


def _spec_key_paths() -> List[Tuple[str, ...]]:
    """Every spec key as a path (``("roles", "<role>", "resources", "cpus")``), from the
    schema's ``spec_field``s (a backend's own keys are its registry's to know)."""
    paths: List[Tuple[str, ...]] = []

    def walk(cls: type, prefix: Tuple[str, ...], top_level_only: bool = False) -> None:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if schema.HELP not in field.metadata:
                continue
            if top_level_only and not field.metadata.get(schema.TOP_LEVEL):
                continue
            key = prefix + (field.metadata.get(schema.KEY) or field.name,)
            paths.append(key)
            tp = hints[field.name]
            nested = [a for a in (tp, *typing.get_args(tp))
                      if isinstance(a, type) and dataclasses.is_dataclass(a)]
            if nested and typing.get_args(tp)[:1] == (Role,):
                walk(nested[0], key + (_ROLE,))
            elif nested:
                walk(nested[0], key)

    walk(JobSpec, ())
    walk(RoleSpec, (), top_level_only=True)
    return paths


def unknown_key_hint(key_path: KeyPath, key: str, known: Sequence[str],
                     value: Any = None) -> str:
    """What to say about unknown ``key`` (whose value is ``value``) at ``key_path``:
    under ``roles``, a close role name (``workers`` -> ``worker``); the key it stands for
    when it is a known misplaced one (``workers: 2`` -> ``roles.worker.count``,
    ``workers: {...}`` -> ``roles.worker``); a role's name outside ``roles`` (``worker:``
    -> ``roles.worker``); where a key of that name belongs when it belongs elsewhere (a
    role's key outside a role: ``roles.worker.count``); else a close key here, else the
    valid ones."""
    here = tuple(str(p) for p in key_path)
    if here == ("roles",):
        close = did_you_mean(key, known, "")
        if close:
            return close
    alias = MISPLACED_ALIASES.get(str(key))
    if alias and alias.startswith("roles.") and isinstance(value, dict):
        alias = alias.rpartition(".")[0]  # workers: {count: 2}: the role's block
    if alias:
        return f"did you mean {alias!r}?"
    role = next((str(p) for p in key_path[1:2] if key_path[:1] == ("roles",)), None)
    if str(key) in {r.value for r in Role} and (value is None or isinstance(value, dict)):
        return f"it is not a key here: did you mean {'roles.' + str(key)!r}?"
    elsewhere = []
    for path in _spec_key_paths():
        if path[-1] != key:
            continue
        concrete = tuple(role if p == _ROLE and role else p for p in path)
        if concrete[:-1] != here and _ROLE not in concrete[:len(here)]:
            elsewhere.append(".".join(concrete))
    inside = [p for p in elsewhere if p.startswith(".".join(here) + ".")] if here else []
    plain = [p for p in elsewhere if _ROLE not in p]
    elsewhere = inside or plain or elsewhere
    if elsewhere:
        elsewhere.sort(key=lambda p: (p.count("."), p))
        places = " or ".join(repr(p.replace(_ROLE, DEFAULT_HINT_ROLE)) for p in elsewhere[:3])
        return f"it is not a key here: did you mean {places}?"
    return did_you_mean(key, known, "valid keys: " + ", ".join(known))


def _name(value: Any, _: KeyPath) -> str:
    if not isinstance(value, str) or not re.fullmatch(schema.JOB_NAME, value):
        raise ValueError("a job name is 1-63 letters, digits, '_', '.', '-' "
                         f"starting with a letter or digit, got {value!r}")
    return value


def _backend_name(value: Any, _: KeyPath) -> str:
    """A backend's name as the spec writes it; the registry says whether one exists."""
    if not isinstance(value, str) or not BACKEND_NAME.fullmatch(value):
        raise ValueError(f"a backend name is letters, digits, '_' or '-', got {value!r}")
    return value


def expand_path(text: str) -> str:
    """``~`` and ``$VAR``/``${VAR}`` of the submitting environment expanded in a path,
    ``$$`` standing for a literal ``$``; ``ValueError`` naming an unset variable, or a
    ``${`` without its ``}``."""
    parts = []
    for part in text.split("$$"):
        if re.search(r"\$\{[^}]*$", part):
            raise ValueError(f"a ${{ without its closing }} in the path {text!r} (write "
                             "${NAME}, or $$ for a literal $)")
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
    elif isinstance(value, list):
        for index, word in enumerate(value):
            if not isinstance(word, (str, int, float)) or isinstance(word, bool):
                quote = (f" (write '{str(word).lower()}' in quotes)"
                         if isinstance(word, bool) else "")
                raise ValueError(f"each word of a command is a string (or a number), got "
                                 f"{kind_of(word)} at [{index}]{quote}")
        argv = [str(a) for a in value]
    else:
        raise ValueError(f"a command is a string or a list of strings, got {kind_of(value)}")
    if not argv or not argv[0]:
        raise ValueError("the command is empty")
    for index, word in enumerate(argv):
        if "\0" in word:  # no argv carries one: exec would refuse it
            raise ValueError(f"word [{index}] of the command holds a NUL character "
                             f"(\\u0000): {word!r}")
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
        return resolved(base_dir / Path(expand_path(value)))
    return parse


def resolved(path: Path) -> Path:
    """``path`` made absolute with its symlinks resolved; ``ValueError`` naming the path
    when a symlink loop is in the way (``OSError`` ELOOP, or ``RuntimeError`` before
    Python 3.13)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise
        raise ValueError(f"{path} is behind a symlink loop (too many levels of symbolic "
                         "links): fix or remove the link") from None


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
        if "\0" in env[name]:  # no environment carries one: exec would refuse it
            raise ValueError(f"{name}: the value holds a NUL character (\\u0000), which "
                             f"no environment variable can: {env[name]!r}")
    return env


def _resources(value: Any, key_path: KeyPath, locations: Locations, base: Resources,
               errors: _Errors) -> Resources:
    section = _Section(value, key_path, locations, "resources", errors)

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
           resources: Resources, command_failed: bool = False) -> Dict[Role, RoleSpec]:
    raw = {role: section.raw(role.value, {}) for role in Role}
    section.finish()
    roles: Dict[Role, RoleSpec] = {}
    worker_count = 1
    for role in (Role.WORKER, Role.SERVER, Role.SCHEDULER):
        sub = _Section(raw[role], section.key_path + (role.value,), section.locations,
                       f"roles.{role.value}", section.errors)
        if role is Role.SCHEDULER:
            count = sub.take("count", _int(1), 1)
            if count != 1:
                sub.error("count", "there is always exactly 1 scheduler")
                count = 1
        else:
            count = sub.take("count", _int(1), worker_count)
        if role is Role.WORKER:
            worker_count = count
        role_command = sub.take("command", _command, command)
        if role_command is None:
            if not command_failed and "command" not in sub.failed:
                section.errors.add(section.locations.error(
                    ("command",), "missing: set a top-level command (or one for every role)"))
                command_failed = True  # said once for all roles
            role_command = ("missing",)
        role_resources = sub.take(
            "resources",
            lambda v, p: _resources(v, p, section.locations, resources, section.errors),
            resources)
        role_env = sub.take("env", _env, {})
        sub.finish()
        roles[role] = RoleSpec(role=role, count=count, command=role_command,
                               resources=role_resources, env=role_env)
    return {role: roles[role] for role in Role}


def _network(value: Any, key_path: KeyPath, locations: Locations,
             errors: _Errors) -> NetworkSpec:
    section = _Section(value, key_path, locations, "network", errors)

    def interface(v: Any, _: KeyPath) -> str:
        if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", v):
            raise ValueError(f"expected a network interface name like eth0, got {v!r}")
        return v

    iface = section.take("interface", interface, None)
    low, high = section.take("ports", lambda v, _: parse_port_range(v), (9000, 9999))
    section.finish()
    return NetworkSpec(interface=iface, port_low=low, port_high=high)


def choice(enum_class: Any) -> Callable[[Any, KeyPath], Any]:
    """A key's parser that takes one of ``enum_class``'s values (its member)."""
    def parse(v: Any, _: KeyPath) -> Any:
        choices = [c.value for c in enum_class]
        if v not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {v!r}")
        return enum_class(v)
    return parse


#: the smallest ``rendezvous.heartbeat_timeout``: supervisors beat every third of it
#: (``runtime.agent.Schedule``), and an idle agent turns about once a second
MIN_HEARTBEAT_TIMEOUT_S = 3.0


def _rendezvous(value: Any, key_path: KeyPath, locations: Locations,
                base_dir: Path, errors: _Errors) -> RendezvousSpec:
    section = _Section(value, key_path, locations, "rendezvous", errors)
    defaults = RendezvousSpec(dir=Path("."))

    def duration(v: Any, _: KeyPath) -> float:
        return parse_duration(v)

    def heartbeat_timeout(v: Any, _: KeyPath) -> float:
        seconds = parse_duration(v)
        if seconds < MIN_HEARTBEAT_TIMEOUT_S:
            raise ValueError(f"must be at least {MIN_HEARTBEAT_TIMEOUT_S:g}s, got {v!r}: "
                             "every task's supervisor writes its heartbeat three times per "
                             "timeout, and more often than once a second only burns CPU")
        return seconds

    result = RendezvousSpec(
        dir=section.take("dir", _path_in(base_dir), None) or default_runs_dir(),
        startup_timeout_s=section.take("startup_timeout", duration, defaults.startup_timeout_s),
        grace_s=section.take("grace", duration, defaults.grace_s),
        heartbeat_timeout_s=section.take("heartbeat_timeout", heartbeat_timeout,
                                         defaults.heartbeat_timeout_s),
        stall_timeout_s=_duration_or_null(section, "stall_timeout", defaults.stall_timeout_s),
        exit_timeout_s=_duration_or_null(section, "exit_timeout", defaults.exit_timeout_s),
        exit_grace_s=section.take("exit_grace", duration, defaults.exit_grace_s),
        member_start=section.take("member_start", choice(MemberStart), defaults.member_start),
        scheduler=section.take("scheduler", choice(SchedulerStart), defaults.scheduler),
        trust_shared=section.take("trust_shared", _bool, defaults.trust_shared),
    )
    section.finish()
    return result


def _duration_or_null(section: "_Section", key: str,
                      default: Optional[float]) -> Optional[float]:
    """A duration key of ``section`` that may be null (off)."""
    if key in section.data and section.data[key] is None:
        section.known.append(key)
        return None
    return section.take(key, lambda v, _: parse_duration(v), default)


def _restarts(value: Any, key_path: KeyPath, locations: Locations,
              errors: _Errors) -> RestartsSpec:
    section = _Section(value, key_path, locations, "restarts", errors)
    defaults = RestartsSpec()

    def duration(v: Any, _: KeyPath) -> float:
        return 0.0 if v == 0 and not isinstance(v, bool) else parse_duration(v)

    def reasons(v: Any, _: KeyPath) -> Tuple[EndReason, ...]:
        items = v if isinstance(v, list) else [v]
        allowed = [r.value for r in RESTARTABLE] + list(ON_ALIASES)
        chosen: List[EndReason] = []
        for item in items:
            if not isinstance(item, str) or item not in allowed:
                hint = did_you_mean(item, allowed, f"reasons: {', '.join(allowed)}",
                                    cutoff=0.5)
                raise ValueError(f"unknown end reason {item!r} ({hint})")
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


def _container(value: Any, key_path: KeyPath, locations: Locations,
               errors: _Errors) -> ContainerSpec:
    section = _Section(value, key_path, locations, "container", errors)

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
    if not result.image and "image" not in section.failed:
        section.error("image", "missing: the container image to run")
    return result


def _backends(value: Any, key_path: KeyPath, locations: Locations,
              errors: _Errors) -> Dict[str, Any]:
    """The ``backends:`` mapping: backend name -> that backend's block as plain data
    (``{}`` for an empty one). Which names exist and what each block may hold is the
    registry's to check (``backends.registry.options_for``)."""
    if not isinstance(value, dict):
        raise ValueError(f"backends must be a mapping of backend name to options, "
                         f"got {kind_of(value)}")
    result = {}
    for name, raw_options in value.items():
        try:
            _backend_name(name, key_path + (name,))
        except ValueError as exc:
            errors.add(locations.error(key_path + (name,), str(exc)))
            continue
        result[name] = {} if raw_options is None else raw_options
    return result


def parse_options(options_class: Callable[..., T], data: Any, key_path: KeyPath,
                  locations: Locations) -> T:
    """``data`` (one ``backends.<name>`` block) as ``options_class``, by its fields' types;
    a ``SpecError`` at each offending key otherwise (all of them: ``SpecErrors``)."""
    try:
        return from_data(options_class, data, every_error=True)  # type: ignore[arg-type]
    except ConversionError as exc:
        raise SpecErrors.of([locations.error(key_path + e.path, e.problem, e.hint)
                             for e in exc.all]) from None
