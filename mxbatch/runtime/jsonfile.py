"""JSON records on disk, written so that a reader never sees half of one: temp file +
fsync + rename; a reader treats a missing, partial or unreadable file as "not there"."""

import json
import os
import random
import socket
from typing import Any, Optional


def temp_name(target: str) -> str:
    head, tail = os.path.split(target)
    return os.path.join(head, ".%s.%s.%d.%d.tmp" % (tail, socket.gethostname(), os.getpid(),
                                                     random.getrandbits(32)))


def write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write_json(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` by temp file + fsync + rename."""
    tmp = temp_name(path)
    try:
        write_synced(tmp, json.dumps(data, sort_keys=True).encode())
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def read_json(path: str) -> Optional[Any]:
    """The JSON in ``path``; None when missing, unreadable or incomplete."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode())
    except (OSError, ValueError):
        return None
