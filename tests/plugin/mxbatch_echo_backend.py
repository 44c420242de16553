"""A tiny third-party backend, as a plugin would ship it (tests only).

``echo`` is the local backend under another name with a ``backends.echo:`` block
of its own: ``greeting`` goes into every task's environment as
``ECHO_GREETING`` and prefixes every line ``mxbatch logs`` prints, so a test can
see that the options reach render, and that a later process rebuilds the
backend with the options the job was submitted with.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

from mxbatch.backends.local import LocalBackend, LocalRequest
from mxbatch.backends.records import JobRecord
from mxbatch.runtime.roles import Role
from mxbatch.spec.plan import JobPlan
from mxbatch.spec.typed import option


@dataclasses.dataclass(frozen=True)
class EchoOptions:
    """``backends.echo``."""

    greeting: str = option("hello", "put into every task's environment as ECHO_GREETING")
    slots: Optional[int] = option(None, "at most this many tasks run at once")


class EchoBackend(LocalBackend):
    name = "echo"
    options_class = EchoOptions

    def render(self, plan: JobPlan) -> LocalRequest:
        tasks = [dataclasses.replace(t, env=dict(t.env, ECHO_GREETING=self.options.greeting))
                 for t in plan.run.tasks]
        plan = dataclasses.replace(plan, run=dataclasses.replace(plan.run, tasks=tasks))
        return super().render(plan)

    def logs(self, record: JobRecord, role: Role, rank: int) -> Iterator[str]:
        for line in super().logs(record, role, rank):
            yield f"[{self.options.greeting}] {line}"


class BrokenBackend(LocalBackend):
    """``broken``: a plugin with a bug. Rendering raises an unexpected exception, as a
    bug anywhere in mxbatch would, so the tests see how the CLI reports internal
    errors."""

    name = "broken"

    def render(self, plan: JobPlan) -> LocalRequest:
        raise RuntimeError("the broken test plugin fails on purpose")


class FollowedBackend(LocalBackend):
    """``followed``: the local backend that cannot supervise a job in the CLI, as a batch
    system cannot: ``submit --wait`` starts the detached job manager and follows the job
    the way it follows an SGE or Slurm job (Ctrl-C cancels it from the follow loop)."""

    name = "followed"

    def attach(self, request: LocalRequest) -> Optional[LocalRequest]:
        return None
