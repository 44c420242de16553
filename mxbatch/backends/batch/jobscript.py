"""The text of a batch job: directives rendered from a role group's resources (and the
spec's native pass-through), how each is checked to be representable in a job-script
line or a DRMAA native specification, the job scripts filled from ``jobscripts/``, the
runtime command every array task runs, and the names and ids a submission has. Pure:
nothing here runs a command or touches the queue (``common`` does that)."""

from __future__ import annotations

import dataclasses
import os
import re
import string
from importlib import resources
from typing import Callable, List, Optional, Sequence, Tuple

from ...errors import MxbatchError
from ...quoting import quote
from ...runtime import wire
from ...runtime.planfile import RunPlan, TaskInfo
from ...runtime.roles import Role
from ...spec.located import KeyPath
from ...spec.plan import JobPlan
from ..bundle import runtime_command

#: where a directive's values come from in the spec, for errors (``("backends",
#: "slurm", "extra", 1)``); empty: mxbatch's own, always representable
NO_SOURCE: KeyPath = ()
#: the spec key of the run directory (``rendezvous.dir``)
RUN_DIR_SOURCE: KeyPath = ("rendezvous", "dir")


class Unrepresentable(ValueError):
    """A value that a scheduler's option parser cannot carry; the message says why
    (``check`` turns it into a spec error at the value's key)."""


#: quotes one argv token for a directive parser (raises ``Unrepresentable``)
TokenQuoter = Callable[[str], str]


@dataclasses.dataclass(frozen=True)
class Directive:
    """One native option: ``-pe smp 2`` is ``Directive("-pe", ("smp", "2"))``,
    ``--mem=2048M`` is ``Directive("--mem", ("2048M",), joiner="=")``."""

    flag: str
    args: Tuple[str, ...] = ()
    joiner: str = " "
    source: KeyPath = NO_SOURCE

    def argv(self) -> List[str]:
        """The option as argv tokens, unquoted (what the scheduler must end up with)."""
        if self.joiner == "=" and self.args:
            return [f"{self.flag}={','.join(self.args)}"]
        return [self.flag, *self.args]

    def text(self, quote_token: TokenQuoter) -> str:
        """The option as one line's text for a parser that splits and unquotes it."""
        return " ".join(quote_token(token) for token in self.argv())


def native_directives(extra: Sequence[str], source: KeyPath) -> List[Directive]:
    """Raw user options (``native``/``extra``), passed through last and unchanged;
    an argument starting with ``-`` begins a directive, the ones after it are its values.
    ``source`` is the list's key; each directive remembers its first item's index."""
    directives: List[Directive] = []
    for index, arg in enumerate(extra):
        if arg.startswith("-") or not directives:
            directives.append(Directive(arg, source=(*source, index)))
        else:
            last = directives[-1]
            directives[-1] = dataclasses.replace(last, args=last.args + (arg,))
    return directives


def directive_lines(prefix: str, directives: Sequence[Directive],
                    quote_token: TokenQuoter) -> str:
    """Directive lines for a job script, each token quoted for the scheduler's parser."""
    return "\n".join(f"{prefix} {d.text(quote_token)}" for d in directives)


def flat_argv(directives: Sequence[Directive]) -> List[str]:
    return [arg for d in directives for arg in d.argv()]


def check_representable(plan: JobPlan, directives: Sequence[Directive],
                        quote_token: TokenQuoter, where: str) -> None:
    """A spec error at the key a value came from if ``quote_token`` cannot write it."""
    for directive in directives:
        for token in directive.argv():
            try:
                quote_token(token)
            except Unrepresentable as exc:
                raise plan.spec.error(directive.source or RUN_DIR_SOURCE,
                                      f"{token!r} cannot be passed in {where}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class RoleGroup:
    """The tasks of one role, submitted as one array job."""

    role: Role
    tasks: Tuple[TaskInfo, ...]

    @property
    def count(self) -> int:
        return len(self.tasks)

    @property
    def first(self) -> TaskInfo:
        return self.tasks[0]


def role_groups(run: RunPlan) -> List[RoleGroup]:
    return [RoleGroup(role, tuple(run.tasks_of(role))) for role in Role if run.tasks_of(role)]


def render_jobscript(template: str, **values: str) -> str:
    """Fill ``jobscripts/<template>`` beside this module (``string.Template``, ``${name}``)."""
    text = resources.files(__package__).joinpath("jobscripts", template).read_text()
    return string.Template(text).substitute(values)


def parse_job_id(pattern: "re.Pattern[str]", output: str, argv: Sequence[str]) -> str:
    """The ``job_id`` named group of ``pattern`` in a submit command's output."""
    match = pattern.search(output)
    if match is None:
        raise MxbatchError(f"cannot find a job id in the output of {' '.join(argv)!r}: "
                           f"{output.strip()!r}")
    return match.group("job_id")


def runtime_argv(plan: JobPlan, role: Optional[Role] = None,
                 task_from: Optional[str] = None) -> List[str]:
    """What each task runs: the runtime zipapp for ``role`` (an array task: its rank from
    the array), or for the task whose index is in the variable ``task_from``."""
    argv = runtime_command(plan.run.python, plan.run.layout.runtime, "run", plan.run.run_dir)
    if task_from is not None:
        return argv + ["--task-from", task_from]
    assert role is not None
    return argv + ["--role", role.value]


def job_name(plan: JobPlan, role: Role) -> str:
    return f"{plan.job_id}-{role.value}"


def job_id_export(plan: JobPlan) -> str:
    """The job script line that puts ``MXBATCH_JOB_ID`` into every process it starts."""
    return f"export {wire.JOB_ID}={quote(plan.job_id)}"


def relative_to_run_dir(plan: JobPlan, path: str) -> str:
    """``path`` (inside the run directory) relative to it: what a scheduler that runs the
    task in the run directory resolves, whatever characters the run directory has."""
    return os.path.relpath(path, plan.run.run_dir)
