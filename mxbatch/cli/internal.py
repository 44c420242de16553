"""Unexpected exceptions of the CLI: one paragraph for the user, the traceback in a log.

No ``mxbatch`` command ends in a Python traceback. An exception that is neither an
:class:`~mxbatch.errors.MxbatchError` nor one of click's is a bug of mxbatch:
:func:`internal_error` writes its full traceback to a new file under
``$MXBATCH_HOME/internal-errors/`` (``mxbatch-<uid>`` in the system's temporary
directory when that cannot be written) and returns an
:class:`~mxbatch.errors.InternalError` (exit code ``ExitCode.INTERNAL``) whose message
names that file.

The log holds the whole command line, so it is written only into a folder that is
this user's alone: a real directory (not a symlink), owned by this user, mode 0700
(``private_folder``). A folder someone else made first (``/tmp/mxbatch-<uid>``
created by another user, or a symlink planted there) is refused, and the traceback is
printed on stderr instead, with why no log was written.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import List, Optional, Tuple

from .. import __version__
from ..errors import InternalError
from ..spec.paths import mxbatch_home

#: the folder under ``$MXBATCH_HOME`` holding one log file per internal error
LOG_FOLDER = "internal-errors"
#: the only mode a log folder may have
PRIVATE_MODE = 0o700


def log_directories() -> List[Path]:
    """Where an internal error's log goes, first choice first."""
    return [mxbatch_home() / LOG_FOLDER, Path(tempfile.gettempdir()) / f"mxbatch-{os.getuid()}"]


def private_folder(folder: Path) -> Tuple[Optional[int], str]:
    """An open descriptor of ``folder`` (made if missing) when it is this user's alone:
    a directory, not a symlink, owned by the effective uid, mode 0700; else None and
    why not. The checks are made on the open descriptor (``O_NOFOLLOW``), so the
    folder cannot be swapped for another between the check and the write."""
    try:
        os.makedirs(folder.parent, mode=PRIVATE_MODE, exist_ok=True)
        try:
            os.mkdir(folder, PRIVATE_MODE)
        except FileExistsError:
            pass
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if stat.S_ISLNK(_lstat_mode(folder)):
            return None, f"{folder} is a symlink"
        return None, f"{folder}: {exc.strerror or exc}"
    info = os.fstat(fd)
    problem = ""
    if info.st_uid != os.geteuid():
        problem = f"{folder} is owned by uid {info.st_uid}, not by this user ({os.geteuid()})"
    elif stat.S_IMODE(info.st_mode) != PRIVATE_MODE:
        problem = f"{folder} has mode {stat.S_IMODE(info.st_mode):04o}, not 0700"
    if problem:
        os.close(fd)
        return None, problem
    return fd, ""


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _write_log(text: str) -> Tuple[Optional[Path], List[str]]:
    """The log file written, or None and why no folder would do."""
    stem = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    refused = []
    for folder in log_directories():
        fd, problem = private_folder(folder)
        if fd is None:
            refused.append(problem)
            continue
        try:
            name, log = _new_file(fd, stem)
            with open(log, "w", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(text)
            return folder / name, []
        except OSError as exc:
            refused.append(f"{folder}: {exc.strerror or exc}")
        finally:
            os.close(fd)
    return None, refused


def _new_file(folder_fd: int, stem: str) -> Tuple[str, int]:
    """A new file ``<stem>[-N].log`` in the folder (several errors of one process in
    one second each get their own); its name and descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for number in range(100):
        name = f"{stem}-{number}.log" if number else f"{stem}.log"
        try:
            return name, os.open(name, flags, 0o600, dir_fd=folder_fd)
        except FileExistsError:
            continue
    raise FileExistsError(f"{stem}-*.log: a hundred of them exist")


def internal_error(exc: BaseException) -> InternalError:
    """Log ``exc``'s traceback (with the command line and versions); the error to raise."""
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    header = (f"mxbatch {__version__}, Python {sys.version.split()[0]}\n"
              f"command: {' '.join(sys.argv)}\n\n")
    log, refused = _write_log(header + details)
    if log is not None:
        where = f"the traceback is in {log}. Please report it with that file."
    else:
        where = ("no log file was written (" + "; ".join(refused) + "). Please report "
                 "it with this traceback:\n" + details.rstrip("\n"))
    return InternalError(
        f"internal error of mxbatch (a bug, not a problem of your job or spec): "
        f"{type(exc).__name__}: {exc}. Nothing more was done by this command; {where}")
