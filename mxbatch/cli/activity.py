"""What ``status`` says of a running role's activity, from its supervisor's measures:
how long since its last output, its CPU use, and once it has been idle a while, since
when and where (its main thread's stack: in a kvstore call, in MXNet, in its own code).
A hung job so shows in ``status`` long before the stall timeout ends it."""

from __future__ import annotations

import time
from typing import List, Optional

from ..backends.status import TaskStatus
from ..runtime.stacks import MainStack
from ..runtime.states import TaskState


def activity(task: TaskStatus, now: Optional[float] = None) -> str:
    """``output 3s ago, CPU 97%``; idle: ``output 70s ago, CPU 0%, idle 62s in a kvstore
    call (mxnet/kvstore/kvstore.py:240 in push), from train.py:30 in main (...)``; empty
    for a task that does not run or was not measured yet."""
    if task.state is not TaskState.RUNNING or task.cpu_s is None:
        return ""
    now = time.time() if now is None else now
    parts: List[str] = []
    if task.output_at is not None:
        parts.append(f"output {max(0, now - task.output_at):.0f}s ago")
    else:
        parts.append("no output yet")
    if task.cpu_pct is not None:
        parts.append(f"CPU {task.cpu_pct:.0f}%")
    stack = MainStack.parse(task.stack) if task.stack else None
    if stack is not None and task.progress_at is not None:
        since = time.strftime("%H:%M:%S", time.localtime(task.progress_at))
        parts.append(f"idle {max(0, now - task.progress_at):.0f}s (since {since}) "
                     f"{stack.describe()}")
    if task.batches is not None:
        parts.append(f"{task.batches} batches pushed")
    return ", ".join(parts)
