"""Where mxbatch keeps its own files on the submitting host: the one owner of
``$MXBATCH_HOME`` (job records, internal-error logs, caches) and of the site config
file's location. A leaf: it imports nothing of mxbatch."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

#: names another config file ("" = none at all)
CONFIG_ENV = "MXBATCH_CONFIG"
#: names the folder of mxbatch's own state (default ``~/.mxbatch``)
HOME_ENV = "MXBATCH_HOME"


def mxbatch_home() -> Path:
    """``$MXBATCH_HOME`` or ``~/.mxbatch``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".mxbatch").expanduser()


def jobs_dir() -> Path:
    """Where the job records live: ``$MXBATCH_HOME/jobs``."""
    return mxbatch_home() / "jobs"


def cache_dir() -> Path:
    """Where mxbatch's caches live: ``$MXBATCH_HOME/cache`` (the runtime archive, packed
    Python environments, the batch queues' shared views)."""
    return mxbatch_home() / "cache"


def config_path() -> Optional[Path]:
    """Where the config file is looked for; None when ``MXBATCH_CONFIG`` is set empty."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit is not None:
        return Path(explicit).expanduser() if explicit else None
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "mxbatch" / "config.yaml"


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and any missing folder above it, each mode 0700 whatever the
    umask (``Path.mkdir(parents=True)`` makes the parents ``0777 & ~umask``); ``OSError``
    as ``mkdir`` gives it (``FileExistsError`` when ``path`` is there but no folder)."""
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):  # a symlink too: a loop fails below, in its words
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not folder.is_dir():
                raise
    if not missing and not path.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is no folder", str(path))
