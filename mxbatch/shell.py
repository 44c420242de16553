"""The one place that runs external commands (qsub, sbatch, scancel...).

Always an argv list (never a shell), always a timeout; a failure raises
``CommandError`` carrying argv, exit code, stdout and stderr.
"""

from __future__ import annotations

import subprocess
import time
from typing import List, Mapping, Optional, Sequence, Union

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
        raise _timed_out(argv, exc.stdout, exc.stderr, timeout) from None
    except OSError as exc:
        raise _not_started(argv, exc) from None
    if check and result.returncode != 0:
        raise CommandError(argv, result.returncode, result.stdout, result.stderr)
    return result


def run_together(commands: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT_S,
                 env: Optional[Mapping[str, str]] = None
                 ) -> List[Union[subprocess.CompletedProcess, CommandError]]:
    """Run every argv of ``commands`` at once, all within ``timeout`` (one deadline for
    all), and return, in their order, each one's completed process (exit 0) or the
    ``CommandError`` that ``run`` would raise for it. Every command has ended when this
    returns: one that passes the deadline is killed."""
    deadline = time.monotonic() + timeout
    started: List[Union[subprocess.Popen, CommandError]] = []
    for argv in commands:
        try:
            started.append(subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, errors=osbytes.ERRORS,
                env=dict(env) if env is not None else None))
        except OSError as exc:
            started.append(_not_started(argv, exc))
    results: List[Union[subprocess.CompletedProcess, CommandError]] = []
    for argv, proc in zip(commands, started):
        if isinstance(proc, CommandError):
            results.append(proc)
            continue
        try:
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            results.append(_timed_out(argv, *proc.communicate(), timeout))
            continue
        if proc.returncode != 0:
            results.append(CommandError(argv, proc.returncode, out, err))
        else:
            results.append(subprocess.CompletedProcess(list(argv), 0, out, err))
    return results


def _not_started(argv: Sequence[str], exc: OSError) -> CommandError:
    return CommandError(argv, None, "", str(exc), note="could not be started")


def _timed_out(argv: Sequence[str], out, err, timeout: float) -> CommandError:
    return CommandError(argv, None, _text(out), _text(err),
                        note=f"no answer within {timeout:g}s")


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
