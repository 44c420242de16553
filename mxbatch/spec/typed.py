"""Plain data (as YAML or JSON gives it) <-> typed dataclasses, driven by type hints.

``from_data(cls, data)`` builds a dataclass (or any supported type) from plain
data, checking every value against the field's real type as
``typing.get_type_hints`` reports it: ``bool``, ``int``, ``float``, ``str``,
enums (by value), ``Optional[X]``, ``Tuple[X, ...]``, ``List[X]``,
``Dict[K, V]``, nested dataclasses, and ``Seconds`` (a duration: a number or
``"30s"``, ``"10m"``...). A wrong value raises ``ConversionError`` carrying the
key path, so a caller can say where in a file it is. ``to_data`` is the inverse.

``option(default, help)`` declares a dataclass field with a one-line help text
(shown by ``mxbatch render --help`` and in the documentation).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import shlex
import typing
from typing import Any, Dict, List, NewType, Optional, Tuple, Type, TypeVar

from ..errors import did_you_mean
from .units import parse_duration

T = TypeVar("T")
KeyPath = Tuple[Any, ...]

#: a duration in seconds; plain data may spell it ``30s``, ``10m``, ``1h30m``
Seconds = NewType("Seconds", float)

_HELP = "help"


class ConversionError(ValueError):
    """A value that does not fit its type, at ``path`` (keys and list indexes)."""

    def __init__(self, path: KeyPath, problem: str, hint: Optional[str] = None) -> None:
        super().__init__(problem)
        self.path = path
        self.problem = problem
        self.hint = hint
        #: every problem found (``from_data(..., every_error=True)``), this one first
        self.all: List["ConversionError"] = [self]


def option(default: Any, help: str) -> Any:
    """A dataclass field with a default and a one-line ``help``."""
    return dataclasses.field(default=default, metadata={_HELP: help})


@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """One documented field: its name, type as read by people, default and help."""

    name: str
    type: str
    default: Any
    help: str


def describe_fields(cls: type) -> List[FieldDoc]:
    """The fields of dataclass ``cls`` for a reference (``render --help``, the docs)."""
    hints = typing.get_type_hints(cls)
    docs = []
    for field in dataclasses.fields(cls):
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory()  # type: ignore[misc]
                   if field.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                   else None)
        docs.append(FieldDoc(field.name, type_name(hints[field.name]), to_data(default),
                             str(field.metadata.get(_HELP, ""))))
    return docs


def kind_of(value: Any) -> str:
    """How a value reads in an error message: ``a mapping``, ``a string``..."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "nothing"}.get(
        type(value), type(value).__name__)


def type_name(tp: Any) -> str:
    """A type as a reader of the documentation sees it."""
    if tp is Seconds:
        return "duration"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        return f"{type_name(rest[0])} or null" if len(rest) == 1 else " | ".join(
            type_name(a) for a in args)
    if origin in (tuple, list):
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(str(m.value) for m in tp)
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def from_data(tp: Type[T], data: Any, path: KeyPath = (), *, strict: bool = True,
              every_error: bool = False) -> T:
    """``data`` converted to ``tp`` (see the module docstring). ``strict``: unknown keys
    of a dataclass are errors (with a "did you mean" hint); else they are ignored.
    ``every_error``: a dataclass's problems are all found, in its raised error's
    ``all``, not only the first."""
    if every_error and isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, data, path, strict, every_error=True)
    return _convert(tp, data, path, strict)


def _convert(tp: Any, data: Any, path: KeyPath, strict: bool) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return data
    if origin is typing.Union:
        if data is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"unsupported union {tp}")
        return _convert(rest[0], data, path, strict)
    if data is None:
        raise ConversionError(path, f"expected {type_name(tp)}, got nothing")
    if tp is Seconds:
        try:
            return parse_duration(data)
        except ValueError as exc:
            raise ConversionError(path, str(exc)) from None
    if origin in (tuple, list, collections.abc.Sequence):
        if args and args[0] is str and isinstance(data, str):
            data = _split(data, path)
        if not isinstance(data, (list, tuple)):
            raise ConversionError(path, f"expected a list, got {kind_of(data)}")
        items = [_convert(args[0] if args else Any, item, path + (i,), strict)
                 for i, item in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise ConversionError(path, f"expected a mapping, got {kind_of(data)}")
        return {_convert(args[0], key, path + (key,), strict):
                _convert(args[1], value, path + (key,), strict) for key, value in data.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, data, path, strict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp, data, path)
    return _scalar(tp, data, path)


def _split(text: str, path: KeyPath) -> list:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConversionError(path, f"cannot split {text!r}: {exc}") from None


def _enum(tp: Type[enum.Enum], data: Any, path: KeyPath) -> enum.Enum:
    if isinstance(data, tp):
        return data
    for member in tp:
        if member.value == data:
            return member
    try:  # an enum's own _missing_ (Inside takes YAML's true and false)
        return tp(data)
    except (ValueError, TypeError):
        pass
    choices = ", ".join(str(m.value) for m in tp)
    raise ConversionError(path, f"expected one of {choices}, got {data!r}")


def _scalar(tp: Any, data: Any, path: KeyPath) -> Any:
    if tp is bool:
        if isinstance(data, bool):
            return data
        raise ConversionError(path, f"expected true or false, got {data!r}")
    if tp is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
        raise ConversionError(path, f"expected a whole number, got {kind_of(data)} {data!r}")
    if tp is float:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
        raise ConversionError(path, f"expected a number, got {kind_of(data)} {data!r}")
    if tp is str:
        if isinstance(data, str):
            return data
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return str(data)
        raise ConversionError(path, f"expected a string, got {kind_of(data)}")
    raise TypeError(f"unsupported type {tp!r}")


def _dataclass(tp: type, data: Any, path: KeyPath, strict: bool,
               every_error: bool = False) -> Any:
    if not isinstance(data, dict):
        raise ConversionError(path, f"expected a mapping, got {kind_of(data)}")
    fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
    problems: List[ConversionError] = []
    if strict:
        for key in data:
            if key not in fields:
                problems.append(ConversionError(path + (key,), "unknown key", did_you_mean(
                    key, list(fields), "valid keys: " + ", ".join(fields))))
    hints = typing.get_type_hints(tp)
    values: Dict[str, Any] = {}
    for name, field in fields.items():
        if problems and not every_error:
            break
        try:
            if name in data:
                values[name] = _convert(hints[name], data[name], path + (name,), strict)
            elif (field.default is dataclasses.MISSING
                  and field.default_factory is dataclasses.MISSING):  # type: ignore[misc]
                raise ConversionError(path + (name,), "missing")
        except ConversionError as exc:
            problems.extend(exc.all)
    if problems:
        first = problems[0]
        first.all = problems
        raise first
    return tp(**values)


def to_data(value: Any) -> Any:
    """Plain data (JSON-ready) of a dataclass, enum, tuple, dict or scalar."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {to_data(k): to_data(v) for k, v in value.items()}
    return value
