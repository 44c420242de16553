"""Builds ``runtime.pyz``: the in-job runtime as one zipapp file.

The package ``mxbatch/runtime`` is stored as ``mxbatch_runtime/`` with a tiny
top-level ``__main__.py``, so nodes need only ``python3`` (>= 3.8) and the file.

Beside each module goes its bytecode, when the installation has it fresh (pip
compiles it at install time; an editable checkout has it once imported): the
``__pycache__`` file is checked against its source, stored beside the module in the
archive and made an unchecked hash-based ``.pyc``, which costs no compiling here (its
code keeps the installed file's name, which tracebacks show).
A node whose Python is this one's version imports it without compiling (the remote
agent's modules: 0.06 s instead of 0.12 s on the test VM); any other version's
``zipimport`` rejects the magic number and compiles the source, as before.
The archive is deterministic for one installation (fixed timestamps, sorted names,
bytecode only from fresh ``__pycache__`` files).

The archive is built once per content: ``write_runtime`` names it by the digest of its
members (and of how they are packed) in ``$MXBATCH_HOME/cache/runtime/`` and copies it
from there into each run directory (3 ms instead of the 23 ms its deflating takes on
the test VM, on the start path of every job that ships the runtime); the cache keeps the
``CACHED_ARCHIVES`` most recently used archives. A cache that cannot be read or written
only costs the build.

Every process that runs the runtime starts its interpreter with ``-S``
(``runtime_command``; an ssh host's bootstrap too): the runtime needs the standard
library only, and ``site`` with its ``.pth`` files can import whole packages first
(certifi, 20 ms, on the test VM). Not on YARN, whose rendezvous module imports skein.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, List, Optional

from .. import runtime
from ..runtime import trust
from ..spec.paths import make_private_dirs, mxbatch_home

RUNTIME_SOURCE = Path(runtime.__file__).resolve().parent
PACKAGE = "mxbatch_runtime"
_MAIN = (
    "import sys\n"
    f"from {PACKAGE}.__main__ import main\n"
    "sys.exit(main())\n"
)
_EPOCH = (1980, 1, 1, 0, 0, 0)
#: the interpreter option of every process that runs the runtime: no ``site``
NO_SITE = "-S"
#: how the members are packed (part of a cached archive's name: another packing, another
#: archive); the fastest deflate: the default level took 50 ms of the CLI's time here
_COMPRESS_LEVEL = 1
_PACKING = f"zip deflate {_COMPRESS_LEVEL} {_EPOCH} 644"
#: archives of other contents kept in the cache (other installations sharing the home)
CACHED_ARCHIVES = 4


def cache_dir() -> Path:
    """Where built archives are kept: ``$MXBATCH_HOME/cache/runtime``."""
    return mxbatch_home() / "cache" / "runtime"


def runtime_command(python: str, pyz: str, *args: str) -> List[str]:
    """The argv that runs ``pyz`` (``runtime.pyz``) with ``args`` under ``python``."""
    return [python, NO_SITE, pyz, *args]


def installed_bytecode(source: Path, data: Optional[bytes] = None) -> Optional[bytes]:
    """The ``.pyc`` for ``source`` (whose bytes are ``data``, read if not given) in the
    archive, made from its fresh ``__pycache__`` file: the same code (tracebacks name the
    installed file), as an unchecked hash-based file. None when there is none, or it is
    stale (its recorded size or time is not the source's) or not a timestamp-based file
    of this Python."""
    import importlib.util

    try:
        cached = Path(importlib.util.cache_from_source(str(source))).read_bytes()
        data = source.read_bytes() if data is None else data
        stat = source.stat()
    except (OSError, NotImplementedError):
        return None
    if (len(cached) < 16 or cached[:4] != importlib.util.MAGIC_NUMBER
            or int.from_bytes(cached[4:8], "little") != 0
            or int.from_bytes(cached[8:12], "little") != int(stat.st_mtime) & 0xFFFFFFFF
            or int.from_bytes(cached[12:16], "little") != len(data) & 0xFFFFFFFF):
        return None
    return (importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")  # hash-based, unchecked
            + importlib.util.source_hash(data) + cached[16:])


def runtime_members() -> Dict[str, bytes]:
    """``{archive name: content}``: the top-level ``__main__.py``, the runtime's sources
    and the bytecode that could be had for them."""
    members = {"__main__.py": _MAIN.encode("utf-8")}
    for path in sorted(RUNTIME_SOURCE.glob("*.py")):
        name = f"{PACKAGE}/{path.name}"
        members[name] = path.read_bytes()
        pyc = installed_bytecode(path, members[name])
        if pyc is not None:
            members[name + "c"] = pyc
    return members


def archive_bytes(members: Dict[str, bytes]) -> bytes:
    """The zipapp of ``members`` (deterministic: fixed timestamps, sorted names)."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED,
                         compresslevel=_COMPRESS_LEVEL) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, members[name])
    return buffer.getvalue()


def members_digest(members: Dict[str, bytes]) -> str:
    """A name for the archive of ``members``: the digest of their names and contents and
    of the packing."""
    import hashlib

    digest = hashlib.blake2b(_PACKING.encode(), digest_size=16)
    for name in sorted(members):
        digest.update(b"%d:%s\0%d\0" % (len(name), name.encode(), len(members[name])))
        digest.update(members[name])
    return digest.hexdigest()


def _replace_with(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically (a temporary file beside it, renamed)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cached_archive(members: Dict[str, bytes], cache: Path) -> bytes:
    """The archive of ``members``: from ``cache`` when it was built before (its use
    recorded in its modification time), else built and kept there, with the
    ``CACHED_ARCHIVES`` most recently used of the others."""
    path = cache / f"runtime-{members_digest(members)}.pyz"
    data = _read_trusted(path)
    if data is not None:
        return data
    data = archive_bytes(members)
    try:
        make_private_dirs(cache)
        _replace_with(path, data)
        others = sorted((p for p in cache.glob("runtime-*.pyz") if p != path),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[CACHED_ARCHIVES:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # no cache: the next job builds it again
    return data


def _read_trusted(path: Path) -> Optional[bytes]:
    """The bytes of the cached archive ``path`` (its use recorded in its modification
    time) when nobody but this user could have written them: the file is no symlink,
    is this user's and writable by nobody else, in a trusted folder
    (``trust.untrusted_folder``); else None (the archive is built again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & 0o022 or trust.untrusted_folder(str(path.parent))):
            return None
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read()
        os.utime(fd)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def write_runtime(target: Path, cache: Optional[Path] = None) -> Path:
    """Write the zipapp to ``target`` (atomically) and return it; built at most once per
    content, in ``cache`` (default ``cache_dir()``)."""
    _replace_with(target, cached_archive(runtime_members(),
                                         cache_dir() if cache is None else cache))
    return target
