"""The Python environment shipped to every YARN container (``backends.yarn.python_env``).

Without it, containers run the submitter's interpreter by its absolute path, which
exists only where every NodeManager host has the same virtualenv. With it, the
environment travels with the application as a skein archive file that YARN unpacks
into each container's directory as ``python-env/``; the runtime and the roles run
``python-env/bin/python`` (the role's ``python``/``python3`` too: ``python-env/bin``
leads ``PATH``).

- a path (``.tar.gz``, ``.tgz``, ``.tar`` or ``.zip``; relative to the spec file): an
  archive made by ``venv-pack`` or ``conda-pack``. A venv-pack archive links
  ``bin/python`` to the base interpreter by its absolute path (venv-pack ships no
  interpreter), which the nodes need at that path; conda-pack ships one.
- ``auto``: this process's environment (a virtualenv: venv-pack; a conda
  environment: conda-pack), packed once into ``$MXBATCH_HOME/cache/python-env/`` under
  a content key (the packer, Python version, prefix and installed distributions) and
  reused by later submissions while that key holds.

``resolve`` decides the archive (reads the environment's file list, packs nothing);
``ensure_packed`` packs it at submission when ``auto`` has no cached archive yet.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import List, Optional, TextIO

from ...errors import BackendUnavailable, MxbatchError
from ...runtime import trust
from ...spec.paths import make_private_dirs, mxbatch_home

#: the ``backends.yarn.python_env`` value that packs this process's environment
AUTO = "auto"
#: the directory YARN unpacks the archive into, in every container's directory
ARCHIVE_DIR = "python-env"
#: the interpreter the container script runs (relative to the container's directory)
INTERPRETER = f"./{ARCHIVE_DIR}/bin/python"
#: what YARN unpacks (LocalResourceType.ARCHIVE)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


class Packer(enum.Enum):
    """The tool that packs an environment for ``auto`` (and its pip package)."""

    VENV_PACK = "venv-pack"
    CONDA_PACK = "conda-pack"

    @property
    def module(self) -> str:
        return self.value.replace("-", "_")


class PythonEnvError(ValueError):
    """``backends.yarn.python_env`` cannot be used: ``problem`` and a ``hint``."""

    def __init__(self, problem: str, hint: Optional[str] = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


@dataclasses.dataclass(frozen=True)
class PythonEnv:
    """The archive every container unpacks: ``archive`` (a path on the submitting
    host); for ``auto``, the environment packed into it (``prefix``) and by what."""

    archive: str
    auto: bool = False
    prefix: Optional[str] = None
    packer: Optional[Packer] = None

    @property
    def interpreter(self) -> str:
        return INTERPRETER

    def describe(self) -> str:
        """For ``mxbatch render``: where the archive comes from, and what runs it."""
        if self.auto:
            state = ("cached: reused" if Path(self.archive).is_file()
                     else f"not cached yet: packed by {self.packer.value if self.packer else '?'}"
                          " at submission, then reused")
            source = f"auto: {self.prefix} packed into {self.archive} ({state})"
        else:
            source = f"archive {self.archive}"
        needs = ""
        if self.packer is Packer.VENV_PACK and self.prefix is not None:
            home = base_home(Path(self.prefix))
            needs = (f"\nvenv-pack ships no interpreter: every node needs the base Python in "
                     f"{home}" if home else "")
        return (f"{source}\nunpacked by YARN into {ARCHIVE_DIR}/ in every container; the "
                f"runtime and the roles run {INTERPRETER}; PATH starts with "
                f"$PWD/{ARCHIVE_DIR}/bin (python and python3 of the role command){needs}")


def base_home(prefix: Path) -> Optional[str]:
    """The base interpreter's directory of a virtualenv (``home`` in ``pyvenv.cfg``)."""
    try:
        lines = (prefix / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            return value.strip()
    return None


def cache_dir() -> Path:
    """Where ``auto`` keeps packed environments: ``$MXBATCH_HOME/cache/python-env``."""
    return mxbatch_home() / "cache" / "python-env"


def resolve(value: str, base: Path, prefix: Optional[Path] = None,
            cache: Optional[Path] = None) -> PythonEnv:
    """The environment ``value`` (``auto`` or an archive path, relative to ``base``)
    names; ``PythonEnvError`` if it cannot be used. ``prefix``: the environment
    ``auto`` packs (default: this process's); ``cache``: default ``cache_dir()``."""
    if value.strip() == AUTO:
        return _auto(Path(sys.prefix) if prefix is None else prefix,
                     cache_dir() if cache is None else cache)
    path = base / Path(value).expanduser()
    if path.is_dir():
        raise PythonEnvError(f"{path} is a directory, not an archive",
                             "pack the environment: venv-pack -p DIR -o env.tar.gz "
                             "(or conda-pack), or write auto")
    if not path.name.endswith(ARCHIVE_SUFFIXES):
        raise PythonEnvError(f"YARN unpacks {', '.join(ARCHIVE_SUFFIXES)} archives, not "
                             f"{path.name}")
    if not path.is_file():
        raise PythonEnvError(f"no such archive: {path}",
                             "make it with venv-pack or conda-pack, or write auto")
    return PythonEnv(archive=str(path.resolve()))


def packer_for(prefix: Path) -> Packer:
    """conda-pack for a conda environment, venv-pack for a virtualenv."""
    if (prefix / "conda-meta").is_dir():
        return Packer.CONDA_PACK
    if (prefix / "pyvenv.cfg").is_file():
        return Packer.VENV_PACK
    raise PythonEnvError(f"auto packs a virtualenv or a conda environment, and mxbatch runs "
                         f"from neither ({prefix})",
                         "run mxbatch from a virtualenv, or give an archive's path")


def _auto(prefix: Path, cache: Path) -> PythonEnv:
    packer = packer_for(prefix)
    key = content_key(prefix, packer)
    archive = cache / f"{packer.value}-{key}.tar.gz"
    return PythonEnv(archive=str(archive), auto=True, prefix=str(prefix), packer=packer)


def installed(prefix: Path) -> List[str]:
    """The installed distributions of an environment, by their metadata directories'
    names (``mxnet-1.9.1.dist-info``...; a conda environment's ``conda-meta`` files)."""
    names = [p.name for pattern in ("lib/python*/site-packages/*.dist-info",
                                    "lib/python*/site-packages/*.egg-info",
                                    "lib/python*/site-packages/*.egg-link",
                                    "Lib/site-packages/*.dist-info",
                                    "conda-meta/*.json")
             for p in prefix.glob(pattern)]
    return sorted(names)


def content_key(prefix: Path, packer: Packer) -> str:
    """16 hex digits that change when what would be packed changes: the packer, this
    Python's version, the prefix (a relocated venv differs) and ``installed``."""
    digest = hashlib.sha256()
    for part in [packer.value, sys.version, str(prefix.resolve()), *installed(prefix)]:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def editable(prefix: Path) -> List[str]:
    """Distributions installed in development mode (``pip install -e``): their code stays
    at its path on this host, which the packed environment only points at."""
    names = []
    for record in sorted(prefix.glob("lib/python*/site-packages/*.dist-info/direct_url.json")):
        try:
            info = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and info.get("dir_info", {}).get("editable"):
            names.append(record.parent.name.split("-")[0])
    names += [p.name[:-len(".egg-link")]
              for p in prefix.glob("lib/python*/site-packages/*.egg-link")]
    return names


def ensure_packed(env: PythonEnv, out: TextIO = sys.stderr) -> bool:
    """Make sure ``env.archive`` exists: for ``auto`` without a cached archive that only
    this user could have written (``trust.trusted_file``), pack ``env.prefix`` into the
    cache (atomically: a temporary name, then renamed); a cache folder another user can
    change is an error (exit 2). Returns whether it packed. ``BackendUnavailable`` if
    the packer is not installed."""
    archive = Path(env.archive)
    found = trust.untrusted_folder(str(archive.parent)) if env.auto else None
    if found is not None:
        raise MxbatchError(f"the packed Python environments' cache {archive.parent} is in "
                           f"{found.describe()}: another user could replace what every "
                           "container runs (make it yours alone: chmod 700)", exit_code=2)
    if archive.is_file() and (not env.auto or trust.trusted_file(str(archive))):
        if env.auto:  # a cached one is reused only if no other user could have made it
            out.write(f"mxbatch: reusing the packed Python environment {archive}\n")
        return False
    if not env.auto or env.prefix is None or env.packer is None:
        raise MxbatchError(f"the Python environment archive {archive} is gone", exit_code=2)
    packer = env.packer
    try:
        module = importlib.import_module(packer.module)
    except ImportError:
        raise BackendUnavailable(
            f"backends.yarn.python_env: auto needs {packer.value} to pack {env.prefix}: "
            + ("pip install 'mxbatch[yarn]'" if packer is Packer.VENV_PACK
               else "conda install conda-pack")) from None
    prefix = Path(env.prefix)
    in_place = editable(prefix)
    out.write(f"mxbatch: packing the Python environment {prefix} with {packer.value} into "
              f"{archive} (once: later submissions reuse it while its distributions stay "
              "the same)\n")
    if in_place:
        out.write(f"mxbatch: warning: editable installs ({', '.join(in_place)}) are not "
                  "packed: the archive points at their source on this host, which the "
                  "nodes must see at the same path\n")
    out.flush()
    make_private_dirs(archive.parent)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial.tar.gz")
    try:
        module.pack(prefix=str(prefix), output=str(partial), format="tar.gz", force=True,
                    verbose=False)
        os.replace(partial, archive)
    except Exception as exc:  # the packers raise their own errors (editable, conda...)
        raise MxbatchError(f"{packer.value} could not pack {prefix}: {exc}") from None
    finally:
        if partial.exists():
            partial.unlink()
    return True
