"""The training script a role's command runs, and whether it exists.

A command runs a script when its first word is a Python interpreter (``python``,
``python3``, ``python3.11``, by any path) and a later argument ends in ``.py``: the
first such argument, unless ``-m`` or ``-c`` comes before it. When that file is not in
the workdir (on backends whose workdir is this machine's, ``Backend.workdir_is_here``:
local, a shared or shipped workdir) every role would fail at once with "can't open
file": ``submit`` and ``launch`` refuse the job (``check_scripts``: a spec error at the
command's file:line, exit 2, nothing submitted; ``--no-check`` skips it for a script
that exists only on the nodes), ``doctor SPEC`` warns.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..errors import SpecErrors, did_you_mean
from ..runtime.roles import Role
from ..spec.schema import JobSpec

#: the flag of ``submit`` and ``launch`` that skips ``check_scripts``
NO_CHECK_FLAG = "--no-check"

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


def script_of(argv: Sequence[str]) -> Optional[str]:
    """The script ``argv`` runs with Python, if it runs one (see the module docstring)."""
    if not argv or not _PYTHON.fullmatch(Path(argv[0]).name):
        return None
    for arg in argv[1:]:
        if arg in ("-m", "-c"):
            return None
        if arg.endswith(".py") and not arg.startswith("-"):
            return arg
    return None


@dataclasses.dataclass(frozen=True)
class MissingScript:
    """A script that roles' commands run but the workdir does not have."""

    script: str
    path: Path
    roles: List[Role]

    def message(self) -> str:
        roles = ", ".join(role.value for role in self.roles)
        return (f"the {roles} command runs {self.script}, but {self.path} does not exist "
                "(every role would fail at once): check the command and workdir")

    def problem(self) -> str:
        """The problem as a spec error words it (the key names the command)."""
        return (f"runs {self.script}, but {self.path} does not exist where the roles run "
                f"(the {', '.join(role.value for role in self.roles)} would fail at once)")

    def hint(self) -> str:
        """A script of a close name in the same folder, else how to go on."""
        try:
            near = sorted(p.name for p in self.path.parent.glob("*.py") if p.is_file())
        except OSError:
            near = []
        otherwise = (f"fix the command or workdir, or give {NO_CHECK_FLAG} (check_script: "
                     "false) if the script exists only on the nodes")
        close = did_you_mean(self.path.name, near, "")
        return f"{close} Else {otherwise}" if close else otherwise


def missing_scripts(spec: JobSpec) -> List[MissingScript]:
    """Each script the roles' commands run that is not a file, relative paths taken in
    the spec's workdir. In a container (``spec.container``) only a script in the workdir
    (mounted at its own path) is checked: one elsewhere may be the image's."""
    found: dict = {}
    for role in Role:
        script = script_of(spec.role(role).command)
        if script is None:
            continue
        path = spec.workdir / _expanded(script)
        if _is_file(path) is not False:  # there, or cannot tell (a folder not readable)
            continue
        if spec.container is not None and not _inside(path, spec.workdir):
            continue
        found.setdefault((script, path), []).append(role)
    return [MissingScript(script, path, roles) for (script, path), roles in found.items()]


def _expanded(script: str) -> Path:
    """``script`` with ``~`` expanded; as written where it names no home directory."""
    try:
        return Path(script).expanduser()
    except RuntimeError:  # ~user of no user
        return Path(script)


def _is_file(path: Path) -> Optional[bool]:
    """Whether ``path`` is a file; None when that cannot be told (no permission)."""
    try:
        return path.is_file()
    except OSError as exc:
        return False if exc.errno == errno.ENAMETOOLONG else None


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or under it, as written (no link resolved)."""
    path, folder = Path(os.path.normpath(path)), Path(os.path.normpath(folder))
    return path == folder or folder in path.parents


def command_key(spec: JobSpec, role: Role) -> Tuple[str, ...]:
    """The key of the command ``role`` runs: its own ``roles.<role>.command`` when the
    spec gives one, else the job's ``command``."""
    own = ("roles", role.value, "command")
    return own if spec.locations.origin(own, exact=True) is not None else ("command",)


def check_scripts(spec: JobSpec) -> None:
    """``SpecErrors`` (exit 2) when a role's command runs a script its workdir does not
    have (``missing_scripts``), each at the key of the command that names it. Only for
    a workdir the roles share with this machine (the caller's to know)."""
    missing = missing_scripts(spec)
    if missing:
        raise SpecErrors.of([spec.error(command_key(spec, m.roles[0]), m.problem(), m.hint())
                             for m in missing])
