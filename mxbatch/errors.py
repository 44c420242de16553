"""The MxbatchError hierarchy and the exit codes the CLI returns for each.

Every error is a ``click.ClickException`` so the CLI prints ``Error: <message>``
and exits with ``exit_code``; no caller needs to format errors itself.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Optional, Sequence

import click


class ExitCode(enum.IntEnum):
    """Process exit codes of the ``mxbatch`` command."""

    OK = 0
    JOB_FAILED = 1
    USAGE = 2  # bad spec, bad flags, rejected submission: nothing was started
    BACKEND_UNAVAILABLE = 3
    NOT_FOUND = 4
    INTERNAL = 70  # a bug of mxbatch (EX_SOFTWARE): the traceback is in a log file
    TIMEOUT = 124
    INTERRUPTED = 130


class MxbatchError(click.ClickException):
    """Base class: a message for the user and an exit code."""

    exit_code = ExitCode.JOB_FAILED

    def __init__(self, message: str, exit_code: Optional[int] = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class SpecError(MxbatchError):
    """A job spec is wrong. Names the file, the line and the key path."""

    exit_code = ExitCode.USAGE

    def __init__(
        self,
        problem: str,
        *,
        path: Optional[Path] = None,
        line: Optional[int] = None,
        key: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> None:
        self.problem = problem
        self.path = path
        self.line = line
        self.key = key
        self.hint = hint
        where = str(path) if path is not None else "<command line>"
        if line is not None:
            where += f":{line}"
        text = f"{where}: {key + ': ' if key else ''}{problem}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


#: how many problems of one spec an error lists at most
MAX_SPEC_ERRORS = 20


class SpecErrors(SpecError):
    """Several problems of one spec, reported at once, sorted by line (at most
    ``MAX_SPEC_ERRORS``). Its ``problem``, ``path``, ``line``, ``key`` and ``hint`` are
    the first one's; ``errors`` holds them all."""

    def __init__(self, errors: Sequence[SpecError]) -> None:
        self.errors = sorted(errors, key=lambda e: (e.line is None, e.line or 0))
        first = self.errors[0]
        shown = self.errors[:MAX_SPEC_ERRORS]
        more = len(self.errors) - len(shown)
        super().__init__(first.problem, path=first.path, line=first.line, key=first.key,
                         hint=first.hint)
        lines = [f"{len(self.errors)} problems:"] + [f"  {e.message}" for e in shown]
        if more:
            lines.append(f"  and {more} more")
        self.message = "\n".join(lines)

    @classmethod
    def of(cls, errors: Sequence[SpecError]) -> SpecError:
        """One error for ``errors`` (not empty): the error itself when there is one."""
        unique = list({e.message: e for e in errors}.values())
        return unique[0] if len(unique) == 1 else cls(unique)


class BadInput(MxbatchError):
    """Input that is no job spec and cannot be used (a malformed job id, a path that is
    a symlink loop): nothing was done."""

    exit_code = ExitCode.USAGE


class SubmissionRejected(MxbatchError):
    """The cluster refused the submission; nothing of the job is left queued."""

    exit_code = ExitCode.USAGE


class BackendUnavailable(MxbatchError):
    """A backend cannot be used here (missing library, daemon down...), with a hint."""

    exit_code = ExitCode.BACKEND_UNAVAILABLE


class JobNotFound(MxbatchError):
    exit_code = ExitCode.NOT_FOUND


class InternalError(MxbatchError):
    """An unexpected exception inside mxbatch: a bug, reported without a traceback."""

    exit_code = ExitCode.INTERNAL


class WaitTimeout(MxbatchError):
    exit_code = ExitCode.TIMEOUT


class CommandError(MxbatchError):
    """An external command failed: carries argv, exit code, stdout and stderr."""

    def __init__(self, argv: Sequence[str], returncode: Optional[int], stdout: str, stderr: str,
                 note: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        status = "timed out" if returncode is None else f"exited with {returncode}"
        parts = [f"command {' '.join(self.argv)!r} {status}{': ' + note if note else ''}"]
        if stderr.strip():
            parts.append("stderr: " + stderr.strip())
        if stdout.strip():
            parts.append("stdout: " + stdout.strip())
        super().__init__("\n".join(parts))


def did_you_mean(word: object, known: Sequence[str], otherwise: str,
                 cutoff: float = 0.6) -> str:
    """The hint of every "unknown ..." error: ``did you mean 'x'?`` for the closest of
    ``known``, else ``otherwise`` (e.g. the list of valid names)."""
    import difflib  # only for a mistake

    close = difflib.get_close_matches(str(word), list(known), n=1, cutoff=cutoff)
    return f"did you mean {close[0]!r}?" if close else otherwise
