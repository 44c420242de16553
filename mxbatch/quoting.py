"""How every renderer shows commands and environments: POSIX shell words.

``mxbatch render`` output is meant to be pasted into a shell, so argv lists and
``NAME=value`` pairs are quoted here, once, with ``shlex.quote``.
"""

from __future__ import annotations

import shlex
from typing import Mapping, Sequence


def quote(value: str) -> str:
    """One shell word."""
    return shlex.quote(str(value))


def shell_words(argv: Sequence[str]) -> str:
    """``argv`` as one shell command line."""
    return " ".join(quote(a) for a in argv)


def env_assignments(env: Mapping[str, str], separator: str = " ") -> str:
    """``NAME=value`` pairs, sorted by name, each value shell-quoted."""
    return separator.join(f"{name}={quote(value)}" for name, value in sorted(env.items()))
