"""Reading the files a user names (a job spec, the config file, a hostfile) without
hanging or filling memory: only a regular file, of at most ``MAX_INPUT_BYTES``.

A FIFO would block the reader until someone writes to it, ``/dev/zero`` never ends, and
a huge file is a mistake far more often than a spec: each is a ``SpecError`` naming the
file (exit 2). The file is opened without blocking (``O_NONBLOCK``: a FIFO without a
writer does not hold the open) and checked on the open descriptor, then read up to the
limit and one byte more (a file that grew meanwhile is still refused).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

from ..errors import SpecError

#: the largest spec, config or hostfile mxbatch reads (10 MB)
MAX_INPUT_BYTES = 10 * 1000 * 1000


def describe_mode(mode: int) -> str:
    """What kind of file ``mode`` (``st_mode``) is, in words: "a directory"."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return words
    return "not a regular file"


def read_text(path: Path, what: str, *, missing_ok: bool = False,
              limit: int = MAX_INPUT_BYTES) -> Optional[str]:
    """The UTF-8 text of the file ``path``, ``what`` it is in words ("the job spec");
    ``SpecError`` naming the file when it cannot be read, is no regular file, is larger
    than ``limit`` or is no UTF-8. ``missing_ok``: None for a file that does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise SpecError(f"cannot read {what}: no such file", path=path) from None
    except OSError as exc:
        raise SpecError(f"cannot read {what}: {exc.strerror or exc}", path=path) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SpecError(f"cannot read {what}: it is {describe_mode(mode)}, not a regular "
                        "file", path=path)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise SpecError(f"cannot read {what}: {exc.strerror or exc}", path=path) from None
    if len(data) > limit:
        raise SpecError(f"cannot read {what}: it is larger than {limit // 1000_000} MB, "
                        "more than any spec needs (is it the right file?)", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"cannot read {what}: it is no UTF-8 text ({exc})", path=path) from None
