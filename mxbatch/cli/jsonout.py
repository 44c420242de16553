"""The ``--json`` output of every command: one schema version for all of them.

Each command that reports prints one JSON document on stdout with ``--json``: an
object whose ``schema`` key is ``SCHEMA`` (``list --json`` prints a list whose every
row carries it). The shapes are documented in ``docs/reference/json.md``; a new key
may appear in any version, a renamed or removed key or a changed meaning raises
``SCHEMA``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping

#: the version of every ``--json`` document (``render``, ``status``, ``submit``...)
SCHEMA = 1


def document(data: Mapping[str, Any]) -> Dict[str, Any]:
    """``data`` with ``schema`` first."""
    return {"schema": SCHEMA, **{k: v for k, v in data.items() if k != "schema"}}


def dumps(data: Any) -> str:
    """How every command prints its document."""
    return json.dumps(data, indent=2)
