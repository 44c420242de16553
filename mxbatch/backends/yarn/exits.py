"""How a YARN container ended, as an ``EndReason``: the one place YARN's exit statuses
and the ResourceManager's words for them are mapped.

YARN reports a completed container with an exit status (``ContainerExitStatus``: the
process's exit code, or one of YARN's own negative values) and diagnostics. skein's
application master keeps only the diagnostics (``Container.exit_message``), so both
are read: the status where one is known (a test, another client), else the
ResourceManager's fixed sentences (``SchedulerUtils.PREEMPTED_CONTAINER``,
``LOST_CONTAINER``) and the exit code the NodeManager writes into its diagnostics
(``Exit code: 137``, ``exited with a non-zero exit code 143``).

- **preempted**: ``PREEMPTED`` (-102), "Container preempted by scheduler";
- **node_failure**: the container released on a lost node ("Container released on a
  *lost* node", with ``ABORTED``, -100; an ``ABORTED`` container released for another
  reason, "Container released by application", is a failure), and ``DISKS_FAILED``
  (-101: the node's disks went bad under it);
- **failure**: anything else that is not a success: a killed container (137, 143,
  ``KILLED_BY_APPMASTER`` -105, ``KILLED_BY_RESOURCEMANAGER`` -106, the memory limits
  -103/-104...), a non-zero exit.

Pure: no skein, no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Optional

from ...runtime.states import EndReason


class ContainerExitStatus(enum.IntEnum):
    """YARN's ``org.apache.hadoop.yarn.api.records.ContainerExitStatus``."""

    SUCCESS = 0
    INVALID = -1000
    ABORTED = -100
    DISKS_FAILED = -101
    PREEMPTED = -102
    KILLED_EXCEEDED_VMEM = -103
    KILLED_EXCEEDED_PMEM = -104
    KILLED_BY_APPMASTER = -105
    KILLED_BY_RESOURCEMANAGER = -106
    KILLED_AFTER_APP_COMPLETION = -107
    KILLED_BY_CONTAINER_SCHEDULER = -108
    KILLED_FOR_EXCESS_LOGS = -109


#: the ResourceManager's diagnostics of a preempted container, and of one on a lost node
PREEMPTED_WORDS = "Container preempted by scheduler"
LOST_NODE_WORDS = "Container released on a *lost* node"
_EXIT_CODE = re.compile(r"(?:exit code|Exit code:|exit status:?)\s*(-?\d+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class ContainerExit:
    """How one container ended: the reason, and YARN's words for it (for the
    attempt's detail)."""

    reason: EndReason
    words: str


def exit_status_in(diagnostics: str) -> Optional[int]:
    """The exit status a container's diagnostics name, if any (the last one named)."""
    found = _EXIT_CODE.findall(diagnostics or "")
    return int(found[-1]) if found else None


def container_exit(exit_status: Optional[int], diagnostics: str = "") -> Optional[ContainerExit]:
    """How a completed container ended (see the module docstring); None for a success
    or when nothing says (no status, no diagnostics)."""
    text = (diagnostics or "").strip()
    status = exit_status if exit_status is not None else exit_status_in(text)
    first = text.splitlines()[0].strip() if text else ""
    if status == ContainerExitStatus.PREEMPTED or PREEMPTED_WORDS.lower() in text.lower():
        return ContainerExit(EndReason.PREEMPTED, first or "preempted (exit status -102)")
    lost = LOST_NODE_WORDS.lower() in text.lower()
    if lost or status == ContainerExitStatus.DISKS_FAILED or (
            status == ContainerExitStatus.ABORTED and not text):
        return ContainerExit(EndReason.NODE_FAILURE,
                             first or f"{_name(status)} (exit status {status})")
    if status == ContainerExitStatus.SUCCESS or (status is None and not text):
        return None
    words = first or f"exit status {status}"
    if status is not None and status < 0:
        words = f"{_name(status)}: {words}" if first else f"{_name(status)} ({words})"
    return ContainerExit(EndReason.FAILURE, words)


def _name(status: Optional[int]) -> str:
    try:
        return ContainerExitStatus(status).name if status is not None else "unknown"
    except ValueError:
        return f"exit status {status}"
