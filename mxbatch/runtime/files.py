"""Writing a file so that a reader sees either the old content or all of the new: the
one implementation of temp file + (fsync) + rename, for records, the sitecustomize
hook, containers' env files and the CLI's job records; and reading such a JSON record
(``read_json``: a missing, partial or unreadable file reads as "not there").

A temporary name is unique per host, process and call, so writers on several hosts
sharing an NFS directory never collide; a failed write leaves no temporary file.
"""

import json
import os
import random
import socket
from typing import Any, Optional


class RunDirUnwritable(OSError):
    """A write into the run directory failed (a full or read-only file system, the
    directory removed): the supervisor cannot record the job any more. The errno and
    text are the failed write's."""

    @classmethod
    def of(cls, error: OSError) -> "RunDirUnwritable":
        if isinstance(error, RunDirUnwritable):
            return error
        return cls(error.errno, error.strerror or str(error), error.filename)

    @property
    def reason(self) -> str:
        """``run directory unwritable: <errno text>``: what the job's records and the
        supervisor's stderr say."""
        return "run directory unwritable: %s" % (self.strerror or "error %s" % self.errno)


def write_in_place(path: str, data: bytes) -> None:
    """Overwrite the existing file ``path`` with ``data`` (truncate, write): not atomic,
    but on a full file system it reuses the blocks the file had, where a temporary
    file would need new ones. For a supervisor's last records only."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def temp_name(target: str) -> str:
    """A hidden temporary name beside ``target``, unique to this host, process and call."""
    head, tail = os.path.split(target)
    return os.path.join(head, ".%s.%s.%d.%d.tmp" % (tail, socket.gethostname(), os.getpid(),
                                                     random.getrandbits(32)))


def write_synced(path: str, data: bytes, mode: int = 0o600) -> None:
    """Create or truncate ``path`` with ``mode`` and write ``data`` through to storage."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``) by temp file + fsync + rename."""
    tmp = temp_name(path)
    try:
        write_synced(tmp, data, mode)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def atomic_write_json(path: str, data: Any, *, indent: Any = None) -> None:
    """``data`` as JSON (sorted keys) written to ``path`` by ``atomic_write``."""
    atomic_write(path, json.dumps(data, sort_keys=True, indent=indent).encode())


def read_json(path: str) -> Optional[Any]:
    """The JSON in ``path``; None when missing, unreadable or incomplete."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode())
    except (OSError, ValueError):
        return None
