"""The one place that runs external commands (qsub, sbatch, scancel...).

Always an argv list (never a shell), always a timeout; a failure raises
``CommandError`` carrying argv, exit code, stdout and stderr.
"""

from __future__ import annotations

import subprocess
from typing import Mapping, Optional, Sequence

from .errors import CommandError
from .runtime import osbytes

DEFAULT_TIMEOUT_S = 60.0


def run(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S, check: bool = True,
        input_text: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run ``argv`` and return the completed process (text mode)."""
    try:
        result = subprocess.run(list(argv), input=input_text, capture_output=True, text=True,
                                errors=osbytes.ERRORS, timeout=timeout,
                                env=dict(env) if env is not None else None, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, None, _text(exc.stdout), _text(exc.stderr),
                           note=f"no answer within {timeout:g}s") from None
    except OSError as exc:
        raise CommandError(argv, None, "", str(exc), note="could not be started") from None
    if check and result.returncode != 0:
        raise CommandError(argv, result.returncode, result.stdout, result.stderr)
    return result


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
