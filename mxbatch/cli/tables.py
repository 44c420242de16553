"""How ``status`` shows a job: the task table and the throughput line."""

from __future__ import annotations

from typing import List, Optional

from ..backends.status import JobStatus, TaskStatus
from ..runtime.roles import Role
from .activity import activity


def rate(value: Optional[float]) -> str:
    """``1234.5`` samples/s as ``1234.5``, big values without decimals."""
    if value is None:
        return ""
    return f"{value:.0f}" if value >= 1000 else f"{value:.1f}"


def throughput_text(status: JobStatus) -> str:
    """``812.4 samples/s from 2 workers; straggler: worker[1] (40.2 samples/s)``."""
    workers = [t for t in status.tasks if t.role is Role.WORKER and t.samples_per_sec is not None]
    text = (f"{rate(status.samples_per_sec)} samples/s from {len(workers)} "
            f"worker{'s' if len(workers) != 1 else ''} (latest values)")
    if status.stragglers:
        slow = [t for t in status.tasks if t.label in status.stragglers]
        text += "; straggler" + ("s" if len(slow) > 1 else "") + ": " + ", ".join(
            f"{t.label} ({rate(t.samples_per_sec)} samples/s)" for t in slow)
    return text


def _rank_text(task: TaskStatus) -> str:
    if task.kv_rank is None or task.role is not Role.WORKER:
        return ""
    return str(task.kv_rank)


def task_table(status: JobStatus) -> str:
    """One row a task: state, host, pid, exit, (MXNet's rank, samples/s,) note."""
    with_rate = any(t.samples_per_sec is not None for t in status.tasks)
    with_rank = any(t.kv_rank is not None for t in status.tasks)
    head = ["TASK", "STATE", "HOST", "PID", "EXIT"]
    head += ["KV.RANK"] * with_rank + ["SAMPLES/S"] * with_rate + ["NOTE"]
    rows: List[List[str]] = [head]
    for task in status.tasks:
        exit_text = task.signal or ("" if task.exit_code is None else str(task.exit_code))
        row = [task.label, task.state.value, task.host, str(task.pid or ""), exit_text]
        row += [_rank_text(task)] * with_rank
        if with_rate:
            slow = " (straggler)" if task.label in status.stragglers else ""
            row.append(rate(task.samples_per_sec) + slow)
        rows.append(row + ["; ".join(part for part in (task.note, activity(task)) if part)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    return "".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
                   + "  " + row[-1] + "\n" for row in rows)
