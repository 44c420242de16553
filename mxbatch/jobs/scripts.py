"""The training script a role's command runs, and whether it exists.

A command runs a script when its first word is a Python interpreter (``python``,
``python3``, ``python3.11``, by any path) and a later argument ends in ``.py``: the
first such argument, unless ``-m`` or ``-c`` comes before it. ``submit`` and
``doctor SPEC`` warn when that file is not in the workdir (on backends whose workdir
is this machine's, ``Backend.workdir_is_here``): every role would fail at once with
"can't open file".
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import List, Optional, Sequence

from ..runtime.roles import Role
from ..spec.schema import JobSpec

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


def missing_scripts(spec: JobSpec) -> List[MissingScript]:
    """Each script the roles' commands run that is not a file, relative paths taken in
    the spec's workdir."""
    found: dict = {}
    for role in Role:
        script = script_of(spec.role(role).command)
        if script is None:
            continue
        path = spec.workdir / Path(script).expanduser()
        if path.is_file():
            continue
        found.setdefault((script, path), []).append(role)
    return [MissingScript(script, path, roles) for (script, path), roles in found.items()]
