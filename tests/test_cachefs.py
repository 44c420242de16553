"""The cachefs test filesystem (ci/clusters/cachefs-up.sh) caches like NFS clients: a change
made on client 1 stays invisible to client 2's lookups, stat() and listings for a while,
but an open() on client 2 sees the current file (close-to-open), and each client sees its
own changes at once. Every probe runs as a process on its client (cachefs-exec.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from .conftest import cluster_env_file, cluster_environment

pytestmark = [pytest.mark.cachefs]
if not cluster_env_file("cachefs").is_file() and "cachefs" not in os.environ.get(
        "MXBATCH_REQUIRE", "").split(","):
    pytestmark.append(pytest.mark.skip(reason="cachefs is not available"))

# What a client runs: these helpers, then prints json.dumps(EXPR) with the names passed.
PRELUDE = """
import json, os, sys

def size(p):
    try:
        return os.stat(p).st_size
    except FileNotFoundError:
        return None

def ino(p):
    return os.stat(p).st_ino

def listing(d):
    return sorted(os.listdir(d))

def read(p):  # [content, size by fstat], or None when missing
    try:
        with open(p) as f:
            return [f.read(), os.fstat(f.fileno()).st_size]
    except FileNotFoundError:
        return None

def write(p, text):
    with open(p, "w") as f:
        f.write(text)

def append(p, text):
    with open(p, "a") as f:
        f.write(text)

def replace(p, text):  # write temp + rename, as the rendezvous publishes a record
    write(p + ".tmp", text)
    os.replace(p + ".tmp", p)

def create_excl(p):
    try:
        os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return "created"
    except FileExistsError:
        return "EEXIST"

globals().update(json.loads(sys.argv[1]))
"""


class CacheFS:
    def __init__(self, env: dict) -> None:
        self.env = env
        self.mnt = Path(env["MXBATCH_CACHEFS_MNT"])
        self.export = Path(env["MXBATCH_CACHEFS_EXPORT"])
        self.clients = int(env["MXBATCH_CACHEFS_CLIENTS"])
        self.exec = env["MXBATCH_CACHEFS_EXEC"]
        self.timeout = float(env["MXBATCH_CACHEFS_TIMEOUT"])

    def on(self, client: int, expr: str, **names: Any) -> Any:
        """Evaluate EXPR (with PRELUDE's helpers and NAMES) in a process on CLIENT."""
        code = PRELUDE + f"print(json.dumps({expr}))"
        result = subprocess.run([self.exec, str(client), sys.executable, "-c", code,
                                 json.dumps(names)], capture_output=True, text=True,
                                timeout=60, env=self.env)
        assert result.returncode == 0, f"client {client}: {expr}: {result.stderr}"
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def fs() -> CacheFS:
    env_file = cluster_env_file("cachefs")
    if not env_file.is_file():
        pytest.fail(f"cachefs is required but not up ({env_file} is missing)")
    cfs = CacheFS(cluster_environment("cachefs"))
    assert cfs.clients >= 2
    return cfs


@pytest.fixture
def shared(fs) -> Tuple[str, Path]:
    """A fresh directory in the export: (its path on the clients, its path in the export).
    Made on the server side, so no client has cached anything of it."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    (fs.export / name).mkdir()
    yield str(fs.mnt / name), fs.export / name
    shutil.rmtree(fs.export / name, ignore_errors=True)


def pause(fs: CacheFS) -> None:
    """Long enough that a change cannot be missed by chance, a fraction of the timeout."""
    time.sleep(min(2.0, fs.timeout / 4))


def still_cached(fs: CacheFS, since: float) -> None:
    """Staleness proves caching only if the cached entry (made after `since`) is younger
    than the timeout: otherwise this machine was too slow to tell."""
    age = time.monotonic() - since
    assert age < fs.timeout, f"inconclusive: {age:.1f}s passed, timeout {fs.timeout}s"


def test_negative_lookup_is_cached(fs, shared):
    d, _ = shared
    p = f"{d}/scheduler.json"
    since = time.monotonic()
    assert fs.on(2, "size(p)", p=p) is None           # client 2: missing (cached)
    fs.on(1, "replace(p, 'addr')", p=p)               # client 1 creates it
    assert fs.on(1, "read(p)", p=p) == ["addr", 4]    # ... and sees it
    pause(fs)
    assert fs.on(2, "[size(p), read(p)]", p=p) == [None, None]  # stat and open: ENOENT
    still_cached(fs, since)


def test_attributes_are_cached(fs, shared):
    d, export = shared
    p = f"{d}/task.json"
    (export / "task.json").write_text("x")
    since = time.monotonic()
    before = fs.on(2, "[size(p), ino(p)]", p=p)
    assert before[0] == 1
    fs.on(1, "replace(p, 'changed')", p=p)            # a new inode, 7 bytes
    assert fs.on(1, "size(p)", p=p) == 7
    pause(fs)
    assert fs.on(2, "[size(p), ino(p)]", p=p) == before  # old size, old inode
    still_cached(fs, since)
    # in place too: an append elsewhere does not change the size cached on client 2
    assert fs.on(2, "read(p)", p=p) == ["changed", 7]
    since = time.monotonic()
    fs.on(1, "append(p, '+more')", p=p)
    assert fs.on(2, "size(p)", p=p) == 7
    still_cached(fs, since)


def test_listing_is_cached(fs, shared):
    d, export = shared
    (export / "server-0.json").write_text("{}")
    since = time.monotonic()
    assert fs.on(2, "listing(d)", d=d) == ["server-0.json"]
    fs.on(1, "replace(p, '{}')", p=f"{d}/worker-0.json")
    assert fs.on(1, "listing(d)", d=d) == ["server-0.json", "worker-0.json"]
    pause(fs)
    assert fs.on(2, "listing(d)", d=d) == ["server-0.json"]
    still_cached(fs, since)


def test_open_sees_the_current_file(fs, shared):
    """Close-to-open: open() revalidates a name the client knows to exist, whatever its
    stat() cache says: replaced by rename, grown past the cached size, shrunk."""
    d, export = shared
    p = f"{d}/record.json"
    (export / "record.json").write_text("old")
    assert fs.on(2, "size(p)", p=p) == 3
    fs.on(1, "replace(p, 'replaced by rename')", p=p)
    assert fs.on(2, "[read(p), size(p)]", p=p) == [["replaced by rename", 18], 18]
    fs.on(1, "write(p, 'g' * 3000000)", p=p)          # in place, far past the cached size
    assert fs.on(2, "read(p)[1]", p=p) == 3000000
    fs.on(1, "write(p, 'short')", p=p)
    assert fs.on(2, "read(p)", p=p) == ["short", 5]


def test_own_changes_are_seen_at_once(fs, shared):
    d, export = shared
    p = f"{d}/mine.json"
    assert fs.on(2, "[size(p), listing(d)]", p=p, d=d) == [None, []]
    fs.on(2, "replace(p, 'mine')", p=p)
    assert fs.on(2, "[size(p), listing(d)]", p=p, d=d) == [4, ["mine.json"]]
    fs.on(2, "os.unlink(p)", p=p)
    assert fs.on(2, "[size(p), listing(d)]", p=p, d=d) == [None, []]
    assert not (export / "mine.json").exists()


def test_exclusive_create_is_atomic_despite_the_cache(fs, shared):
    d, export = shared
    p = f"{d}/abort.json"
    since = time.monotonic()
    assert fs.on(2, "size(p)", p=p) is None           # cached missing on client 2
    assert fs.on(1, "create_excl(p)", p=p) == "created"
    assert fs.on(2, "[size(p), create_excl(p)]", p=p) == [None, "EEXIST"]
    still_cached(fs, since)
    assert fs.on(2, "size(p)", p=p) == 0              # EEXIST told client 2 the truth
    assert (export / "abort.json").exists()


def test_root_namespace_sees_the_export_uncached(fs, shared):
    d, _ = shared
    p = Path(d) / "direct.json"
    assert not p.exists()
    fs.on(1, "write(p, 'x')", p=str(p))
    assert p.read_text() == "x"
    assert os.listdir(d) == ["direct.json"]


def test_caches_expire_after_the_timeout(fs, shared):
    """Client 2's cached lookup, attributes and listing all end TIMEOUT s after they were
    made: never earlier, and not much later."""
    if fs.timeout > 10:
        pytest.skip(f"waits for the cache timeout ({fs.timeout:.0f}s > 10s)")
    d, export = shared
    (export / "old.json").write_text("x")
    view = "[size(d + '/new.json'), size(d + '/old.json'), listing(d)]"
    stale = [None, 1, ["old.json"]]
    t0 = time.monotonic()
    assert fs.on(2, view, d=d) == stale
    t1 = time.monotonic()
    fs.on(1, "[replace(d + '/new.json', 'new'), write(d + '/old.json', 'xyz')]", d=d)
    seen: List[Tuple[float, Any]] = []
    while time.monotonic() < t1 + fs.timeout + 5:
        got = fs.on(2, view, d=d)
        seen.append((time.monotonic(), got))
        if got != stale:
            break
        time.sleep(0.2)
    # every view that ended before the earliest possible expiry was stale
    assert all(got == stale for end, got in seen if end < t0 + fs.timeout), seen
    assert seen[-1][1] == [3, 3, ["new.json", "old.json"]], seen
