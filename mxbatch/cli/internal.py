"""Unexpected exceptions of the CLI: one paragraph for the user, the traceback in a log.

No ``mxbatch`` command ends in a Python traceback. An exception that is neither an
:class:`~mxbatch.errors.MxbatchError` nor one of click's is a bug of mxbatch:
:func:`internal_error` writes its full traceback to a new file under
``$MXBATCH_HOME/internal-errors/`` (the system's temporary directory when that cannot
be written) and returns an :class:`~mxbatch.errors.InternalError` (exit code
``ExitCode.INTERNAL``) whose message names that file.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import List, Optional

from .. import __version__
from ..errors import InternalError
from ..spec.paths import mxbatch_home

#: the folder under ``$MXBATCH_HOME`` holding one log file per internal error
LOG_FOLDER = "internal-errors"


def log_directories() -> List[Path]:
    """Where an internal error's log goes, first choice first."""
    return [mxbatch_home() / LOG_FOLDER, Path(tempfile.gettempdir()) / f"mxbatch-{os.getuid()}"]


def _write_log(text: str) -> Optional[Path]:
    name = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}.log"
    for folder in log_directories():
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / name
            with open(path, "x", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(text)
            return path
        except OSError:
            continue
    return None


def internal_error(exc: BaseException) -> InternalError:
    """Log ``exc``'s traceback (with the command line and versions); the error to raise."""
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    header = (f"mxbatch {__version__}, Python {sys.version.split()[0]}\n"
              f"command: {' '.join(sys.argv)}\n\n")
    log = _write_log(header + details)
    where = f"the traceback is in {log}" if log is not None else \
        "the traceback could not be written to a log file:\n" + details
    return InternalError(
        f"internal error of mxbatch (a bug, not a problem of your job or spec): "
        f"{type(exc).__name__}: {exc}. Nothing more was done by this command; {where}. "
        f"Please report it with that file.")
