"""Real broken storage for tests: a tiny tmpfs mounted over a directory, a read-only bind
mount, a file system filled up. Root only (``mount``); each mount is undone when its
``with`` block ends, lazily (``umount -l``) when something still holds it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here (mount {' '.join(args)}): {result.stderr.strip()}")


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
        _mount("-o", "remount,bind,ro", str(path))
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
