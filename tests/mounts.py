"""Real broken storage for tests: a tiny tmpfs mounted over a directory, a read-only bind
mount, a file system filled up. Root only (``mount``); each mount is undone when its
``with`` block ends, lazily (``umount -l``) when something still holds it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

#: how long a remount read-only is tried again while a write holds the mount busy
BUSY_RETRY_S = 10.0


def _mount(*args: str, retry_busy: bool = False) -> None:
    """``mount ARGS``, or skip the test where mounting is not allowed. ``retry_busy``: a
    remount read-only fails with EBUSY while a file is being written through the mount
    (a supervisor's record, written every second): try again, at once, until it goes
    through between two writes (``BUSY_RETRY_S`` at most)."""
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        result = subprocess.run(["mount", *args], capture_output=True, text=True,
                                check=False)
        if result.returncode == 0:
            return
        if not (retry_busy and "busy" in result.stderr and time.monotonic() < deadline):
            pytest.skip(f"cannot mount here (mount {' '.join(args)}): "
                        f"{result.stderr.strip()}")


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind mount needs root")


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "1m", inodes: int = 0) -> Iterator[Path]:
    """A tmpfs of ``size`` (and at most ``inodes`` inodes, its root included; 0: the
    default) mounted at ``path`` (created) for the block."""
    require_root()
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
    _mount("-t", "tmpfs", "-o", options, "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` made read-only for the block by a read-only bind mount over itself
    (files already open for writing stay writable: they belong to the mount below)."""
    require_root()
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path), retry_busy=True)
        yield path
    finally:
        _umount(path)


def fill(directory: Path) -> Path:
    """Write zeros into a new file in ``directory`` until its file system is full; the
    file."""
    filler = directory / "filler"
    block = b"\0" * 4096
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(block)
        except OSError:
            pass
    return filler
