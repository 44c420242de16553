"""What must never be committed: files over 1 MB (core dumps, logs, archives)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 1_000_000


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_is_over_1_mb():
    big = [f"{path.relative_to(ROOT)} ({path.stat().st_size} bytes)"
           for path in tracked_files() if path.is_file() and path.stat().st_size > LIMIT]
    assert big == [], "tracked files over 1 MB: " + ", ".join(big)


def test_no_core_dump_is_tracked():
    cores = [p for p in tracked_files() if p.name == "core" or
             (p.name.startswith("core.") and p.name[5:].isdigit())]
    assert cores == []
