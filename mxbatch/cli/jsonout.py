"""The ``--json`` output of every command: one schema version for all of them.

Each command that reports prints one JSON document on stdout with ``--json``: an
object whose ``schema`` key is ``SCHEMA`` (``list --json`` prints a list whose every
row carries it). The shapes are documented in ``docs/reference/json.md``; a new key
may appear in any version, a renamed or removed key or a changed meaning raises
``SCHEMA``.

Times have one form in every document: a key ending in ``_at`` (``submitted_at``,
a task's ``started_at``/``ended_at``) holds an RFC 3339 timestamp in UTC with
milliseconds (``2026-12-01T04:47:12.345Z``), or null; ``document`` converts the epoch
seconds the records keep. Durations are ``*_s`` numbers of seconds.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any, Dict, Mapping, Optional

#: the version of every ``--json`` document (``render``, ``status``, ``submit``...)
#: 2: every ``*_at`` is an RFC 3339 UTC timestamp (was epoch seconds), ``list`` rows
#: carry ``submitted_at`` (was ``submitted``, local time), ``status`` carries it too
SCHEMA = 2

#: the help of every ``--json`` option: where the shapes are described, on the
#: documentation site (the installed package has no docs folder)
OPTION_HELP = ("Print one JSON document on stdout (its shape: \"JSON output\" in the "
               "documentation, page reference/json/).")

#: the suffix of every key that holds a time
TIME_SUFFIX = "_at"


def timestamp(epoch: Optional[float]) -> Optional[str]:
    """``2026-12-01T04:47:12.345Z`` from epoch seconds (None stays None)."""
    if epoch is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _times(value: Any, key: str = "") -> Any:
    """``value`` with every number under a ``*_at`` key as a ``timestamp``."""
    if isinstance(value, dict):
        return {k: _times(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_times(v, key) for v in value]
    if key.endswith(TIME_SUFFIX) and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return timestamp(value)
    return value


def document(data: Mapping[str, Any]) -> Dict[str, Any]:
    """``data`` with ``schema`` first and its times as timestamps."""
    return {"schema": SCHEMA, **{k: _times(v, k) for k, v in data.items() if k != "schema"}}


def dumps(data: Any) -> str:
    """How every command prints its document: strict JSON (RFC 8259), a number that is
    not finite (NaN, an infinity: no JSON number) as null."""
    return json.dumps(_finite(data), indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
