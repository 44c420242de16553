"""``--env`` on the command line (``launch``, ``submit``, ``render``): ``NAME`` (the
submitter's value reaches every role: it must be set, and its value is never written
anywhere) or ``NAME=VALUE`` / ``NAME:VALUE`` (set for every role); and
``NAME:VALUE`` pairs for one role (``launch --env-server/--env-worker``)."""

from __future__ import annotations

import re
from typing import Dict, Mapping, Sequence, Tuple

from ..errors import SpecError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def assignment(text: str, flag: str) -> Tuple[str, str]:
    """``NAME=VALUE`` or ``NAME:VALUE`` (split at the first ``=`` or ``:``)."""
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)[=:](.*)\Z", text, re.S)
    if not match:
        raise SpecError(f"expected NAME:VALUE (or NAME=VALUE), got {text!r}", key=flag)
    return match.group(1), match.group(2)


def role_env(pairs: Sequence[str], flag: str) -> Dict[str, str]:
    """``NAME:VALUE`` pairs as variables."""
    return dict(assignment(pair, flag) for pair in pairs)


def common_env(entries: Sequence[str], environ: Mapping[str, str],
               flag: str = "--env") -> Dict[str, str]:
    """``--env`` entries: NAME (checked, inherited: not in the result) or an assignment."""
    env = {}
    for entry in entries:
        if _NAME.fullmatch(entry):
            if entry not in environ:
                raise SpecError(f"{entry} is not set in this environment (launch.py would "
                                "pass nothing; set it, or give NAME=VALUE)", key=flag)
            continue  # inherited with the whole environment, never written down
        name, value = assignment(entry, flag)
        env[name] = value
    return env
