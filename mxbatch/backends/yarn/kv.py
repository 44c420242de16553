"""skein's key-value store as the ``KeyValueStore`` of ``runtime.kvrendezvous``.

Used on both sides of a YARN job:

- in every container, the runtime runs ``--kv-store
  mxbatch.backends.yarn_kv:container_store``: the store of the application the
  container belongs to (``skein.ApplicationClient.from_current()``). When the
  supervisor ends non-zero and the job has an abort record, ``close`` ends the
  application at once with that record as its YARN diagnostics
  (``mxbatch abort: {json}``), so the reason outlives the application master
  (whose key-value store dies with it): ``status`` reads it back from the report;
- in the CLI, ``SkeinKvStore(app_client)`` reads and writes the same keys.

skein is imported only inside functions: importing this module is cheap.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from ...runtime.kvrendezvous import KeyValueStore, decode
from ...runtime.planfile import RunPlan
from ...runtime.states import AbortKind
from .states import FinalStatus

DIAGNOSTICS_PREFIX = "mxbatch abort: "


class SkeinKvStore(KeyValueStore):
    """The key-value store of one running skein application.

    ``ends_application``: ``close`` shuts the application down after a failure
    (set in containers, not in the CLI)."""

    def __init__(self, app: Any, ends_application: bool = False) -> None:
        self.app = app
        self.kv = app.kv
        self.ends_application = ends_application

    def get(self, key: str) -> Optional[bytes]:
        return self.kv.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.kv.put(key, value)

    def put_new(self, key: str, value: bytes) -> bool:
        from skein import kv

        result = self.kv.transaction(conditions=[kv.missing(key)],
                                     on_success=[kv.put(key, value)])
        return bool(result.succeeded)

    def get_prefix(self, prefix: str) -> Dict[str, bytes]:
        return dict(self.kv.get_prefix(prefix))

    def close(self, exit_status: int, abort: Optional[bytes]) -> None:
        """After a failure, end the application with the abort record as diagnostics."""
        if not self.ends_application or exit_status == 0 or abort is None:
            return
        data = decode(abort) or {}
        status = (FinalStatus.KILLED if data.get("kind") == AbortKind.CANCELLED.value
                  else FinalStatus.FAILED)
        try:
            self.app.shutdown(status.value, diagnostics=diagnostics_for(data))
        except Exception:  # the application may be ending already
            pass


def diagnostics_for(abort: Dict[str, Any]) -> str:
    """YARN diagnostics carrying an abort record: a readable line, then the JSON."""
    return "%s%s" % (DIAGNOSTICS_PREFIX, json.dumps(abort, sort_keys=True))


def abort_from_diagnostics(text: str) -> Optional[Dict[str, Any]]:
    """The abort record ``diagnostics_for`` put into YARN diagnostics, if any."""
    start = (text or "").find(DIAGNOSTICS_PREFIX)
    if start < 0:
        return None
    try:
        data, _ = json.JSONDecoder().raw_decode(text, start + len(DIAGNOSTICS_PREFIX))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def container_store(plan: RunPlan) -> SkeinKvStore:
    """Factory for ``--kv-store``: the store of the application this container is in."""
    import skein

    return SkeinKvStore(skein.ApplicationClient.from_current(), ends_application=True)
