"""YARN's and skein's state names, as enums: the one place they are spelled.

``AppState`` and ``FinalStatus`` are YARN's own ``YarnApplicationState`` and
``FinalApplicationStatus`` (what skein's ``ApplicationReport`` and the
ResourceManager's REST API report); ``ContainerState`` is skein's. They mirror
``skein.model``'s enums member for member (a test checks it) so that reading a
state never needs ``import skein``, which takes over half a second.
"""

from __future__ import annotations

import enum


class AppState(str, enum.Enum):
    NEW = "NEW"
    NEW_SAVING = "NEW_SAVING"
    SUBMITTED = "SUBMITTED"
    ACCEPTED = "ACCEPTED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"

    @property
    def ended(self) -> bool:
        return self in (AppState.FINISHED, AppState.FAILED, AppState.KILLED)


class FinalStatus(str, enum.Enum):
    UNDEFINED = "UNDEFINED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"


class ContainerState(str, enum.Enum):
    WAITING = "WAITING"
    REQUESTED = "REQUESTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"

    @property
    def queued(self) -> bool:
        return self in (ContainerState.WAITING, ContainerState.REQUESTED)

    @property
    def running(self) -> bool:
        return self is ContainerState.RUNNING
