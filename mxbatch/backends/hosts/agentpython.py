"""The Python that runs each host's agent under ssh and mpirun when the spec names none
(``backends.ssh.python``, ``backends.mpi.python`` unset).

The agent needs Python 3.8 or newer and its standard library, nothing else. ``python3``
on a host's ``PATH`` is the one name sure to mean something there, but it is often not
a Python at all: a pyenv or asdf shim (a bash script that runs ``pyenv exec``, which
costs every agent its start-up a second time: 0.1 s of the first step on the test VM)
or an old system Python. The roles' interpreter, when their command names it by its
path, is on every host the job runs on (the roles could not start otherwise). So:

- every task's command starts with the same absolute path of a Python (the file name,
  after its links here, is ``python``, ``python3`` or ``python3.N``; after ``env`` and
  its ``NAME=VALUE`` words too), the roles run as bare processes (a container's
  interpreter says nothing of the host's), and this machine can tell from the path that
  it is 3.8 or newer (it is this interpreter, links resolved, or its real name is
  ``python3.N`` with N >= 8): the agents run under it;
- anything else (a bare ``python3 train.py``, a shell script, a path this machine
  lacks or whose version it cannot tell): ``python3``, as launch.py's roles would find.

A host whose file at that path is older after all fails like a too-old ``python3``
(the bootstrap's version check names the interpreter), with the hint to set
``backends.<ssh|mpi>.python``.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional, Sequence

from ...runtime.planfile import RunPlan

#: what a host runs when neither the spec nor the roles' command names a Python
DEFAULT_AGENT_PYTHON = "python3"
#: the oldest Python the agent runs on
MINIMUM_VERSION = (3, 8)
#: the ``python`` option's description (ssh, mpi)
AGENT_PYTHON_HELP = ("the Python (3.8 or newer) that runs each host's agent (default: the "
                     "roles' own when their command names it by its path, else python3)")
_PYTHON_NAME = re.compile(r"python(?:3(?:\.(\d+))?)?")


def agent_python(configured: Optional[str], run: RunPlan) -> str:
    """The interpreter that runs each host's agent: ``configured`` when the spec names
    one, else the roles' own (see the module docstring), else ``python3``."""
    if configured:
        return configured
    if run.container is not None:
        return DEFAULT_AGENT_PYTHON
    return roles_python([task.argv for task in run.tasks]) or DEFAULT_AGENT_PYTHON


def roles_python(commands: Sequence[Sequence[str]]) -> Optional[str]:
    """The absolute path of a Python 3.8+ that starts every one of ``commands``, as far
    as this machine can tell; None when they do not all start with one."""
    programs = {program_of(command) for command in commands}
    if len(programs) != 1 or None in programs:
        return None
    program = programs.pop()
    if not os.path.isabs(program):
        return None
    return program if _is_recent_python(program) else None


def program_of(command: Sequence[str]) -> Optional[str]:
    """The program ``command`` runs: its first word, or the one after ``env`` and its
    ``NAME=VALUE`` words (launch.py's ssh launcher passes no environment, so its users
    write ``env NAME=VALUE /path/python train.py``); None for an empty command or an
    ``env`` with options."""
    words = list(command)
    if words and os.path.basename(words[0]) == "env":
        words = words[1:]
        while words and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]
        if words and words[0].startswith("-"):
            return None
    return words[0] if words else None


def _is_recent_python(path: str) -> bool:
    """``path`` is, after its links, this interpreter or a ``python3.N`` (N >= 8)."""
    if not _PYTHON_NAME.fullmatch(os.path.basename(path)):
        return False
    real = os.path.realpath(path)
    if not os.path.isfile(real) or not os.access(real, os.X_OK):
        return False
    if sys.executable and real == os.path.realpath(sys.executable):
        return sys.version_info[:2] >= MINIMUM_VERSION
    named = _PYTHON_NAME.fullmatch(os.path.basename(real))
    return bool(named and named.group(1)
                and (3, int(named.group(1))) >= MINIMUM_VERSION)
