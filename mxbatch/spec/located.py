"""YAML parsing that remembers where every key came from.

``load_located(text, path)`` returns plain Python data (dicts, lists, scalars)
plus a ``Locations`` map from key paths to their origin (file and 1-based line), so
later validation can say ``job.yaml:12: roles.worker.count: ...``. Only ``SpecError``
escapes: malformed YAML, duplicate keys, non-string keys, anchors bombs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    import yaml

KeyPath = Tuple[Any, ...]
_MAX_NODES = 100_000


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where one key's value came from: a file and line (``path`` None: the command
    line), the key's place in that file (``prefix``: ``profiles.campus`` for a profile
    of the config file), and what the file is to the user (``label``: ``profile campus``)."""

    path: Optional[Path]
    line: Optional[int]
    prefix: KeyPath = ()
    label: str = ""

    def where(self) -> str:
        """``file:line`` (or ``<command line>``)."""
        text = str(self.path) if self.path is not None else "<command line>"
        return text + (f":{self.line}" if self.line is not None else "")

    def describe(self) -> str:
        """``profile campus (/home/u/.config/mxbatch/config.yaml:7)``, or just ``file:line``."""
        return f"{self.label} ({self.where()})" if self.label else self.where()


class Locations:
    """Origins (file, line) of key paths; a missing path falls back to its nearest parent.

    One spec file gives every key the same file; a spec merged with a site profile
    (``config``) gives each key the file it came from, so an error names the profile's
    line in the config file for a value the profile supplied."""

    def __init__(self, path: Optional[Path], *, prefix: KeyPath = (), label: str = "") -> None:
        self.path = path
        self.prefix = tuple(prefix)
        self.label = label
        self._origins: Dict[KeyPath, Origin] = {}

    def add(self, key_path: KeyPath, line: int) -> None:
        self._origins.setdefault(tuple(key_path),
                                 Origin(self.path, line, self.prefix, self.label))

    def set_origin(self, key_path: KeyPath, origin: Origin) -> None:
        self._origins[tuple(key_path)] = origin

    def origin(self, key_path: KeyPath, exact: bool = False) -> Optional[Origin]:
        """The origin of ``key_path`` (``exact``: of that very key, else of its nearest
        parent that has one)."""
        probe = tuple(key_path)
        if exact:
            return self._origins.get(probe)
        while probe:
            if probe in self._origins:
                return self._origins[probe]
            probe = probe[:-1]
        return self._origins.get(())

    def items(self) -> List[Tuple[KeyPath, Origin]]:
        return list(self._origins.items())

    def remove_under(self, key_path: KeyPath) -> None:
        """Forget the origins of ``key_path`` and everything under it (a value replaced)."""
        key_path = tuple(key_path)
        for path in [p for p in self._origins if p[:len(key_path)] == key_path]:
            del self._origins[path]

    def line(self, key_path: KeyPath) -> Optional[int]:
        origin = self.origin(key_path)
        return origin.line if origin is not None else None

    def subtree(self, prefix: KeyPath, label: str) -> "Locations":
        """The origins under ``prefix``, re-keyed relative to it (a profile's keys as
        spec keys), each still naming its place in this file."""
        prefix = tuple(prefix)
        result = Locations(self.path, prefix=self.prefix + prefix, label=label)
        for key_path, origin in self._origins.items():
            if key_path[:len(prefix)] == prefix:
                result.set_origin(key_path[len(prefix):],
                                  dataclasses.replace(origin, prefix=origin.prefix + prefix,
                                                      label=label))
        return result

    def error(self, key_path: KeyPath, problem: str, hint: Optional[str] = None) -> SpecError:
        """A ``SpecError`` pointing at ``key_path`` in the file its value came from."""
        origin = self.origin(key_path)
        if origin is None:
            return SpecError(problem, path=self.path, key=dotted(self.prefix + tuple(key_path))
                             or None, hint=hint)
        return SpecError(problem, path=origin.path, line=origin.line,
                         key=dotted(origin.prefix + tuple(key_path)) or None, hint=hint)


def dotted(key_path: KeyPath) -> str:
    """``("roles", "worker", "command", 0)`` -> ``roles.worker.command[0]``."""
    text = ""
    for part in key_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_located(text: str, path: Optional[Path]) -> Tuple[Any, Locations]:
    """Parse one YAML document into plain data and the line of every key. (PyYAML is
    imported here, by the commands that read YAML: ``launch`` reads none.)"""
    import yaml

    locations = Locations(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise SpecError(f"malformed YAML: {exc.reason} (#x{character:04x})", path=path,
                        line=text.count("\n", 0, exc.position) + 1) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"malformed YAML: {problem}", path=path,
                        line=mark.line + 1 if mark else None) from None
    except (ValueError, RecursionError) as exc:
        raise SpecError(f"malformed YAML: {exc}", path=path) from None
    if node is None:
        return None, locations
    counter = [0]
    data = _convert(node, (), locations, counter, path)
    return data, locations


def _convert(node: yaml.Node, key_path: KeyPath, locations: Locations, counter: list,
             path: Optional[Path]) -> Any:
    import yaml

    counter[0] += 1
    if counter[0] > _MAX_NODES or len(key_path) > 50:
        raise SpecError("YAML document is too large or too deeply nested", path=path)
    locations.add(key_path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: Dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise SpecError("YAML merge keys (<<) are not supported", path=path,
                                line=key_node.start_mark.line + 1, key=dotted(key_path) or None)
            key = _scalar(key_node, key_path, path)
            if isinstance(key, bool) and key_node.style is None:
                # YAML 1.1 reads a plain on/off/yes/no as a boolean, also as a key
                # (``restarts: {on: [...]}``): a key is its text, as YAML 1.2 has it
                key = key_node.value
            if not isinstance(key, str):
                raise SpecError(f"keys must be strings, got {key!r}", path=path,
                                line=key_node.start_mark.line + 1, key=dotted(key_path) or None)
            if key in result:
                raise SpecError("duplicate key", path=path, line=key_node.start_mark.line + 1,
                                key=dotted(key_path + (key,)))
            locations.add(key_path + (key,), key_node.start_mark.line + 1)
            result[key] = _convert(value_node, key_path + (key,), locations, counter, path)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, key_path + (i,), locations, counter, path)
                for i, item in enumerate(node.value)]
    return _scalar(node, key_path, path)


def _scalar(node: yaml.Node, key_path: KeyPath, path: Optional[Path]) -> Any:
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        raise SpecError("keys must be plain scalars", path=path,
                        line=node.start_mark.line + 1, key=dotted(key_path) or None)
    try:
        return yaml.SafeLoader(" ").construct_object(node)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise SpecError(f"bad value: {exc}", path=path, line=node.start_mark.line + 1,
                        key=dotted(key_path) or None) from None
