"""Builds ``runtime.pyz``: the in-job runtime as one zipapp file.

The package ``mxbatch/runtime`` is stored as ``mxbatch_runtime/`` with a tiny
top-level ``__main__.py``, so nodes need only ``python3`` (>= 3.8) and the file.
The archive is deterministic (fixed timestamps, sorted names).
"""

from __future__ import annotations

from pathlib import Path

from .. import runtime

RUNTIME_SOURCE = Path(runtime.__file__).resolve().parent
PACKAGE = "mxbatch_runtime"
_MAIN = (
    "import sys\n"
    f"from {PACKAGE}.__main__ import main\n"
    "sys.exit(main())\n"
)
_EPOCH = (1980, 1, 1, 0, 0, 0)


def runtime_sources() -> dict:
    """``{archive name: source text}`` of the runtime."""
    files = {"__main__.py": _MAIN}
    for path in sorted(RUNTIME_SOURCE.glob("*.py")):
        files[f"{PACKAGE}/{path.name}"] = path.read_text(encoding="utf-8")
    return files


def write_runtime(target: Path) -> Path:
    """Write the zipapp to ``target`` (atomically) and return it."""
    import zipfile

    tmp = target.with_name(target.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in runtime_sources().items():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, text)
    tmp.replace(target)
    return target
