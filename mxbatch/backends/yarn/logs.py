"""Task logs of a YARN job, from the NodeManagers.

Each container's ``logs`` directory is YARN's container log directory, so a
task's log ``<role>-<rank>.log`` stays with the NodeManager after the container
ends (for ``yarn.nodemanager.log.retain-seconds``, or until aggregated). The
NodeManager's REST API serves it, for running and finished containers:
``http://<node http address>/ws/v1/node/containerlogs/<container id>/<file>``.
Its answer wraps the file in a header (``LogLength:N`` ... ``LogContents:``)
that ``unwrap`` removes.
"""

from __future__ import annotations

import dataclasses
import re
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Optional

from ...spec.typed import from_data, to_data
from .states import ContainerState

#: the least time between two fetches of one log while following a job
REFRESH_S = 1.0
HTTP_TIMEOUT_S = 10.0
_LENGTH = re.compile(rb"^LogLength:\s*(\d+)\s*$", re.MULTILINE)
_CONTENTS = b"LogContents:\n"


@dataclasses.dataclass(frozen=True)
class ContainerInfo:
    """Where one task ran: its YARN container and that node's web address, and how
    the container ended."""

    container_id: str
    node_http: str
    state: Optional[ContainerState] = None
    #: YARN's diagnostics of a completed container (skein's ``exit_message``)
    exit_message: str = ""

    @property
    def host(self) -> str:
        """The node's host name (its web address without the port)."""
        return self.node_http.rpartition(":")[0] or self.node_http

    def log_url(self, name: str) -> str:
        return f"http://{self.node_http}/ws/v1/node/containerlogs/{self.container_id}/{name}"

    def to_dict(self) -> Dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ContainerInfo":
        return from_data(cls, dict(data, state=data.get("state") or None), strict=False)


def unwrap(body: bytes) -> bytes:
    """The log file in a NodeManager containerlogs answer (the body itself if unwrapped)."""
    length = _LENGTH.search(body)
    start = body.find(_CONTENTS)
    if length is None or start < 0:
        return body
    start += len(_CONTENTS)
    return body[start:start + int(length.group(1))]


def fetch(container: ContainerInfo, name: str) -> Optional[bytes]:
    """The whole log ``name`` of ``container``; None if the NodeManager has none (yet)."""
    try:
        with urllib.request.urlopen(container.log_url(name), timeout=HTTP_TIMEOUT_S) as answer:
            return unwrap(answer.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


class LogFollower:
    """A ``LogReader``: the bytes of one task's log from an offset, fetched at most every
    ``REFRESH_S`` (unless ``final``); ``locate`` says where the task runs (None: not yet)."""

    def __init__(self, locate: Callable[[], Optional[ContainerInfo]], name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.locate = locate
        self.name = name
        self.clock = clock
        self._next = 0.0

    def __call__(self, offset: int, final: bool) -> Optional[bytes]:
        now = self.clock()
        if not final and now < self._next:
            return None
        self._next = now + REFRESH_S
        container = self.locate()
        if container is None:
            return None
        data = fetch(container, self.name)
        return None if data is None else data[offset:]
