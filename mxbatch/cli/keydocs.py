"""Every key of a job spec as data (``KeyDoc``): its type, default, allowed values, the
backends that use it, its help and an example, read from the schema the parser uses
(``spec.schema``'s ``spec_field`` metadata and type hints) and, for ``backends.<name>``,
from each backend's options dataclass through the registry.

``mxbatch explain`` shows them; the generated reference page (``reference``) is a table
of the same docs, so the two cannot disagree.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import re
import typing
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..errors import MxbatchError
from ..spec import schema
from ..spec.typed import to_data, type_name
from .effective import yaml_text

#: placeholder of a role name in key paths (``roles.<role>.count``)
ROLE = "<role>"
#: the role an example of a ``roles.<role>`` key shows
EXAMPLE_ROLE = "worker"

#: examples that the key's type alone would not give well (a key path, or an option's
#: name in any ``backends.<name>`` block); every example is parsed by tests/test_explain.py
EXAMPLES: Dict[str, str] = {
    "name": "mlp-ps",
    "backend": "slurm",
    "command": "python3 train_mlp.py --kvstore dist_sync",
    "workdir": "examples",
    "roles.<role>.count": "2",
    "network.interface": "eth0",
    "rendezvous.dir": "/shared/mxbatch",
    "restarts.on": "[failure, preempted]",
    "restarts.max": "3",
    "max_tasks": "2000",
    "container.image": "mxnet/python:1.9.1",
    "container.mounts": "[/data:/data:ro]",
    "container.options": "[--shm-size=1g]",
    "resources.cpus": "4",
    "resources.gpus": "1",
    "roles.<role>.command": "python3 train_mlp.py --role-specific-flag",
    "backends.slurm.extra": "[--exclusive]",
    "backends.mpi.extra": "[--mca, btl_tcp_if_include, eth0]",
    "backends.sge.native": "[-l, h_rt=1:00:00]",
    "backends.ssh.ssh_options": "[-p, '2222']",
}
#: examples of ``backends.<name>.<option>`` by the option's name
OPTION_EXAMPLES: Dict[str, str] = {
    "partition": "gpu", "queue": "gpu.q", "account": "ml", "project": "ml", "qos": "normal",
    "constraint": "v100", "node_label": "gpu", "hostfile": "hosts", "hosts": "[node1, node2]",
    "python": "/usr/bin/python3", "sync_dst_dir": "/tmp/mxbatch-work",
    "config": "~/.ssh/config", "slots": "4", "tags": "[mxnet]", "python_env": "auto",
    "rm_url": "http://resourcemanager:8088",
}


def _parser_allowed() -> Dict[str, Tuple[str, ...]]:
    """The values the parser accepts for keys whose type says more than it takes (an
    enum of which only some values are allowed, a signal's name)."""
    from ..runtime.attempts import ON_ALIASES, RESTARTABLE
    from ..spec.parse import CHECKPOINT_SIGNALS

    return {"restarts.on": tuple(r.value for r in RESTARTABLE) + tuple(ON_ALIASES),
            "restarts.checkpoint_signal": tuple(CHECKPOINT_SIGNALS) + ("null",)}


#: an example by the type the reference shows, when no other applies
TYPE_EXAMPLES: Dict[str, str] = {
    "duration": "10m", "duration or null": "10m", "size": "2G", "port range": "9000-9999",
    "path": "/shared/mxbatch", "mapping NAME: value": "{OMP_NUM_THREADS: \"4\"}",
    "signal name or null": "SIGUSR1", "boolean": "true", "integer": "2", "number": "2.5",
}


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One spec key as ``explain`` and the reference show it. ``key``: the dotted path
    (``roles.<role>.count``); ``type`` and ``default`` as people read them; ``allowed``:
    the values it may take (empty: any of its type); ``backends``: those that read it
    (every backend: all the registry's names); ``example``: YAML that sets it."""

    key: str
    type: str
    default: str
    help: str
    allowed: Tuple[str, ...] = ()
    backends: Tuple[str, ...] = ()
    example: str = ""
    #: a section of other keys (``rendezvous``, ``roles``): its keys are under it
    section: bool = False

    def row(self) -> Tuple[str, str, str, str]:
        """``(key, type, default, meaning)``: a line of the reference's tables."""
        return (self.key, self.type, self.default, self.help)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _default_text(field: dataclasses.Field) -> str:
    text = field.metadata.get(schema.DEFAULT)
    if text is not None:
        return text
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
    else:
        return ""
    return yaml_text(to_data(value))


def _help(field: dataclasses.Field, backends: str) -> str:
    """A spec key's help, the registry's backends filled in (``schema.BACKENDS``)."""
    return str(field.metadata[schema.HELP]).replace(schema.BACKENDS, backends)


def spec_keys(cls: type, prefix: str) -> Iterator[Tuple[str, dataclasses.Field, Any]]:
    """``(dotted key, field, type)`` of every spec key of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if schema.HELP not in field.metadata:
            continue  # not set by a spec key
        key = field.metadata.get(schema.KEY) or field.name
        yield (f"{prefix}{key}", field, hints[field.name])


def _dataclass_of(tp: Any) -> Optional[type]:
    """The dataclass inside ``tp`` (``Optional[X]``, ``Mapping[Role, X]``), if any."""
    for candidate in (tp, *typing.get_args(tp)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def allowed_values(tp: Any) -> Tuple[str, ...]:
    """The values a key of type ``tp`` may take, when they are few: an enum's (a list of
    them: each item's), a boolean's; ``null`` too where it is optional."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        inner = allowed_values(rest[0]) if len(rest) == 1 else ()
        return inner + ("null",) if inner else ()
    if typing.get_origin(tp) in (tuple, list) and args:
        return allowed_values(args[0])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tuple(str(member.value) for member in tp)
    if tp is bool:
        return ("true", "false")
    return ()


def _example_value(key: str, shown_type: str, allowed: Sequence[str], default: str) -> str:
    """The value an example gives ``key`` (see ``EXAMPLES``): one of its allowed values
    other than the default where there are some, else what its type suggests."""
    option = key.split(".")[-1] if key.startswith("backends.") else None
    if key in EXAMPLES:
        return EXAMPLES[key]
    if option is not None and option in OPTION_EXAMPLES:
        return OPTION_EXAMPLES[option]
    if allowed:
        values = [v for v in allowed if v not in (default, "null")] or list(allowed)
        if shown_type.startswith("list of"):
            return f"[{values[0]}]"
        return values[0]
    if _concrete(default):
        return default
    if shown_type in TYPE_EXAMPLES:
        return TYPE_EXAMPLES[shown_type]
    if shown_type.startswith("list of"):
        return "[--example]" if default == "[]" else default
    return "example"


def _concrete(default: str) -> bool:
    """A default that is a value (``30s``, ``smp``), not words (``the backend's``)."""
    return bool(re.fullmatch(r"[\w.:/$~-]+", default)) and default not in (
        "null", "none", "required", "[]", "{}")


def snippet(key: str, value: str) -> str:
    """YAML that sets ``key`` (a dotted path; ``<role>`` as ``EXAMPLE_ROLE``) to ``value``
    (YAML text), one level of indentation per key."""
    parts = [EXAMPLE_ROLE if part == ROLE else part for part in key.split(".")]
    lines = [f"{'  ' * depth}{part}:" for depth, part in enumerate(parts[:-1])]
    lines.append(f"{'  ' * (len(parts) - 1)}{parts[-1]}: {value}")
    return "\n".join(lines) + "\n"


def _docs(cls: type, prefix: str, every: Tuple[str, ...], backends_text: str) -> List[KeyDoc]:
    docs: List[KeyDoc] = []
    for key, field, tp in spec_keys(cls, prefix):
        nested = _dataclass_of(tp)
        shown_type = field.metadata.get(schema.TYPE) or (
            "mapping" if nested is not None else type_name(tp))
        default = _default_text(field)
        args = typing.get_args(tp)
        if typing.get_origin(tp) in (dict, collections.abc.Mapping) and args \
                and args[0] is schema.Role and nested is not None:
            children = _docs(nested, f"{key}.{ROLE}.", every, backends_text)
        elif nested is not None:
            children = _docs(nested, f"{key}.", every, backends_text)
        else:
            children = []
        allowed = () if nested is not None else _parser_allowed().get(
            key, allowed_values(tp))
        if children:
            first = children[0]
            example = first.example
        else:
            example = snippet(key, _example_value(key, shown_type, allowed, default))
        docs.append(KeyDoc(key, shown_type, default, _help(field, backends_text), allowed,
                           every, example, section=nested is not None))
        docs += children
    return docs


def _backend_docs(name: str) -> List[KeyDoc]:
    """The keys of ``backends.<name>``, from the backend's options dataclass; none for a
    plugin that cannot be imported here."""
    from ..backends import registry

    try:
        options_class = registry.backend_class(name).options_class
    except MxbatchError:
        return []
    hints = typing.get_type_hints(options_class)
    docs = []
    for field in dataclasses.fields(options_class):
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory()  # type: ignore[misc]
                   if field.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                   else None)
        key = f"backends.{name}.{field.name}"
        shown_type = type_name(hints[field.name])
        default_text = yaml_text(to_data(default))
        allowed = allowed_values(hints[field.name])
        docs.append(KeyDoc(key, shown_type, default_text, str(field.metadata.get("help", "")),
                           allowed, (name,),
                           snippet(key, _example_value(key, shown_type, allowed,
                                                       default_text))))
    return docs


def key_docs() -> List[KeyDoc]:
    """Every key of a job spec, in order: top-level keys, the keys roles share at the
    top level, then each section; ``backends.<name>`` from the registry."""
    from ..backends import registry

    every = tuple(registry.names())
    backends_text = ", ".join(every)
    docs = _docs(schema.JobSpec, "", every, backends_text)
    shared = [(key, field, tp) for key, field, tp in spec_keys(schema.RoleSpec, "")
              if field.metadata.get(schema.TOP_LEVEL)]
    top: List[KeyDoc] = []
    for key, field, tp in shared:
        nested = _dataclass_of(tp)
        shown_type = field.metadata.get(schema.TYPE) or ("mapping" if nested
                                                         else type_name(tp))
        children = _docs(nested, f"{key}.", every, backends_text) if nested else []
        default = _default_text(field)
        example = children[0].example if children else snippet(
            key, _example_value(key, shown_type, (), default))
        top.append(KeyDoc(key, shown_type, default, _help(field, backends_text), (),
                          every, example, section=nested is not None))
        top += children
    docs = docs[:1] + top + docs[1:]
    backends_section = [d for d in docs if d.key == "backends"]
    for name in registry.names():
        docs += _backend_docs(name)
    if backends_section:  # the section's example: an option of the first backend block
        first = next((d for d in docs if d.key.startswith("backends.")
                      and d.key != "backends"), None)
        if first is not None:
            index = docs.index(backends_section[0])
            docs[index] = dataclasses.replace(backends_section[0], example=first.example,
                                              section=True)
    return docs
