"""YAML parsing that remembers where every key came from.

``load_located(text, path)`` returns plain Python data (dicts, lists, scalars)
plus a ``Locations`` map from key paths to 1-based line numbers, so later
validation can say ``job.yaml:12: roles.worker.count: ...``. Only ``SpecError``
escapes: malformed YAML, duplicate keys, non-string keys, anchors bombs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import yaml

from .errors import SpecError

KeyPath = Tuple[Any, ...]
_MAX_NODES = 100_000


class Locations:
    """Line numbers of key paths; a missing path falls back to its nearest parent."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path
        self._lines: Dict[KeyPath, int] = {}

    def add(self, key_path: KeyPath, line: int) -> None:
        self._lines.setdefault(key_path, line)

    def line(self, key_path: KeyPath) -> Optional[int]:
        probe = tuple(key_path)
        while probe:
            if probe in self._lines:
                return self._lines[probe]
            probe = probe[:-1]
        return self._lines.get((), None)

    def error(self, key_path: KeyPath, problem: str, hint: Optional[str] = None) -> SpecError:
        """A ``SpecError`` pointing at ``key_path`` in this file."""
        return SpecError(problem, path=self.path, line=self.line(key_path),
                         key=dotted(key_path) or None, hint=hint)


def dotted(key_path: KeyPath) -> str:
    """``("roles", "worker", "command", 0)`` -> ``roles.worker.command[0]``."""
    text = ""
    for part in key_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_located(text: str, path: Optional[Path]) -> Tuple[Any, Locations]:
    """Parse one YAML document into plain data and the line of every key."""
    locations = Locations(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
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
    if not isinstance(node, yaml.ScalarNode):
        raise SpecError("keys must be plain scalars", path=path,
                        line=node.start_mark.line + 1, key=dotted(key_path) or None)
    try:
        return yaml.SafeLoader(" ").construct_object(node)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise SpecError(f"bad value: {exc}", path=path, line=node.start_mark.line + 1,
                        key=dotted(key_path) or None) from None
