"""The start gate: members start with the scheduler, and wait for it just before ps-lite.

A server or worker imports MXNet for about a second before it connects to the
scheduler. Started only once the scheduler listens (``MemberStart.AFTER_LISTEN``), that
second comes after the scheduler's own import, one after the other. Started at once
(``MemberStart.EARLY``, the default), the members import in parallel with the
scheduler, and a gate holds each one at the last moment before its ps-lite connects,
until this job's scheduler listens on its own socket: so a member still never joins
whatever else may hold the address.

The protocol (``wire.GATE``): the supervisor makes a pipe, keeps its write end, and
starts the role with the read end open and ``MXBATCH_GATE=<fd>:<inode>``. The role's
hook (``pyhook``) holds its Python in MXNet's ``kvstore.create`` of a dist kvstore,
where ps-lite connects (a server's near the end of ``import mxnet``, in
``kvstore_server``; a worker's in its script's ``kv.create``), until the read end says
end of file; the supervisor closes the write end once the scheduler listens
(``Gate.open``). The inode makes sure that the
descriptor is still the gate's (a program that closed it and opened something else
under that number is not held). Any Python program of the role may wait at the gate
itself: ``sitecustomize.mxbatch_wait_for_scheduler()`` (tests' stand-in roles do).

A role that never waits (not Python, or started without the hook) is not held: such
members should use ``rendezvous.member_start: after_listen``. Containers cannot
inherit the descriptor: their members always start after the scheduler listens.
"""

import enum
import os
from typing import Optional

from . import wire


class MemberStart(str, enum.Enum):
    """When servers and workers start their roles (``rendezvous.member_start``)."""

    #: with the scheduler, held by the gate before ps-lite until the scheduler listens
    EARLY = "early"
    #: only once the scheduler listens (roles that do not run through the hook)
    AFTER_LISTEN = "after_listen"


#: the MXNet modules whose ``create`` (of a kvstore) the hook holds at the gate for a
#: dist kvstore: MXNet 1.6 and later define it in ``mxnet/kvstore/base.py``; earlier
#: ones in ``mxnet/kvstore.py``
HELD_MODULES = ("mxnet.kvstore.base", "mxnet.kvstore")


class Gate:
    """One member's gate: a pipe whose read end the role inherits. Closed (``open``)
    once the scheduler listens; the role's hook then goes on."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()  # both close-on-exec here
        self.read_fd: Optional[int] = read_fd
        self._write_fd: Optional[int] = write_fd
        self.value = "%d:%d" % (read_fd, os.fstat(read_fd).st_ino)

    @property
    def held(self) -> bool:
        """The role is (or will be) held: the gate has not been opened."""
        return self._write_fd is not None

    def environment(self) -> dict:
        """The role's variable that names the gate."""
        return {wire.GATE: self.value}

    def started(self) -> None:
        """The role has started with the read end: the supervisor's copy goes."""
        if self.read_fd is not None:
            os.close(self.read_fd)
            self.read_fd = None

    def open(self) -> None:
        """Let the role go on (end of file on its read end). Idempotent."""
        self.started()
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    def close(self) -> None:
        """Release both ends once the role is gone (or being killed): no descriptor of a
        gate outlives its role. (The same as ``open``: nothing is left to hold.)"""
        self.open()
