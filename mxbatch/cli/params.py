"""Parameter types and options the commands share.

- ``Duration``: every time flag (``wait --timeout``, ``doctor --probe-timeout``...) takes
  a duration as the spec does (``90``, ``30s``, ``10m``, ``1h30m``); ``nan``, ``inf``,
  zero and negative values are usage errors (exit 2).
- ``BackendName``: a backend of the registry (built-in or plugin), with a "did you
  mean" for a typo; its help and completion list the registry's names, looked up when
  shown, not when mxbatch is imported.
- ``RegistryHelpOption``: an option whose help text names the registry's backends
  (``{backends}`` in the text), so no help lists them by hand.
- ``JobRef``: a job as a user names it: its id, a unique prefix of it, or ``last``
  (``backends.jobrefs``), converted to the whole id before the command runs; completed
  from the job records (``completion.job_ids``). Every command that takes a job uses it.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional

import click
from click.shell_completion import CompletionItem

from ..spec.units import parse_duration


class Duration(click.ParamType):
    """Seconds from a duration (see the module docstring); ``zero_ok``: ``0`` (``0s``,
    ``0m``...) is 0 seconds (``clean --older-than 0``), not a usage error."""

    name = "duration"

    def __init__(self, zero_ok: bool = False) -> None:
        self.zero_ok = zero_ok

    def convert(self, value: Any, param: Optional[click.Parameter],
                ctx: Optional[click.Context]) -> float:
        if isinstance(value, float):
            return value
        if self.zero_ok and isinstance(value, str) and _ZERO.fullmatch(value.strip()):
            return 0.0
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


#: a duration of nothing: 0, 0.0, 0s, 0ms, 0m, 0h, 0d
_ZERO = re.compile(r"0+(\.0+)?\s*(ms|s|m|h|d)?", re.IGNORECASE)


#: what every command taking a job says of it in its help
JOB_HELP = "JOB_ID: the job's id, a unique prefix of it, or 'last' (the newest job)."


class JobRef(click.ParamType):
    """A job's id from what the user typed: the id, a unique prefix of it, or ``last``
    (``backends.jobrefs.resolve``: an ambiguous prefix exits 2 naming the candidates, no
    match 4)."""

    name = "job"

    def convert(self, value: Any, param: Optional[click.Parameter],
                ctx: Optional[click.Context]) -> str:
        from ..backends.jobrefs import resolve

        return resolve(value)

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> List[CompletionItem]:
        from .completion import job_ids

        return [CompletionItem(job) for job in job_ids(ctx, param, incomplete)]


def backend_list() -> str:
    """``local, mpi, sge, slurm, ssh, yarn`` (plugins included), from the registry."""
    from ..backends.registry import names

    return ", ".join(names())


class BackendName(click.ParamType):
    """A registered backend's name."""

    name = "backend"

    def convert(self, value: Any, param: Optional[click.Parameter],
                ctx: Optional[click.Context]) -> str:
        from ..backends.registry import is_known, names, unknown_backend_hint

        if is_known(value):
            return value
        self.fail(f"unknown backend {value!r} ({unknown_backend_hint(value, names())})",
                  param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> List[CompletionItem]:
        from ..backends.registry import names

        return [CompletionItem(name) for name in names() if name.startswith(incomplete)]


class RegistryHelpOption(click.Option):
    """A ``click.Option`` whose help may say ``{backends}``: the registry's names, filled
    in whenever the help is read (``--help``, the generated CLI reference)."""

    @property  # type: ignore[override]
    def help(self) -> Optional[str]:
        template = self.__dict__.get("_help_template")
        if template is None or "{backends}" not in template:
            return template
        return template.replace("{backends}", backend_list())

    @help.setter
    def help(self, value: Optional[str]) -> None:
        self.__dict__["_help_template"] = value


def backend_option(default_text: str) -> Any:
    """``--backend/-b NAME``, its help listing the registry's backends."""
    return click.option("--backend", "-b", default=None, type=BackendName(),
                        cls=RegistryHelpOption,
                        help="Where to run: {backends} (plugins included; default: "
                             f"{default_text}).")
