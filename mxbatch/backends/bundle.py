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

Every process that runs the runtime starts its interpreter with ``-S``
(``runtime_command``; an ssh host's bootstrap too): the runtime needs the standard
library only, and ``site`` with its ``.pth`` files can import whole packages first
(certifi, 20 ms, on the test VM). Not on YARN, whose rendezvous module imports skein.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from .. import runtime

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


def write_runtime(target: Path) -> Path:
    """Write the zipapp to ``target`` (atomically) and return it."""
    import zipfile

    members = runtime_members()
    tmp = target.with_name(target.name + ".tmp")
    # the fastest deflate: the default level took 50 ms of the CLI's time here
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, members[name])
    tmp.replace(target)
    return target
