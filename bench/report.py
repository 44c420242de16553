"""Where the benchmarks put their results: one section each of ``docs/benchmarks.md``
(between ``<!-- bench:NAME -->`` markers, so each script rewrites only its own) and
PNG charts in ``docs/img/`` (matplotlib, the optional ``bench`` extra), with the
machine they ran on stated."""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "img"
HEADER = """# Benchmarks

Produced by the scripts under `bench/`, each of which rewrites its own section below
(`--write-docs`). Every number is from one run on the machine named in its section;
run a script again to measure yours.
"""


def machine() -> str:
    """The machine a measurement ran on, in one line."""
    try:
        with open("/proc/meminfo") as handle:
            mem_kib = int(handle.readline().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    try:
        load = "%.1f" % os.getloadavg()[0]
    except OSError:
        load = "?"
    return (f"{os.cpu_count()} cores, {mem_kib / 1024 ** 2:.0f} GiB, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}; load average {load} "
            f"at the start; {datetime.date.today().isoformat()}")


def markdown_table(rows: Sequence[Sequence[object]]) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(str(c) for c in head) + " |",
             "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def update_section(name: str, text: str, doc: Path = DOC, header: str = HEADER) -> Path:
    """Replace (or add, at the end) the section ``name`` of ``doc`` (docs/benchmarks.md;
    a new one starts with ``header``) with ``text``; the other sections stay as they are."""
    current = doc.read_text() if doc.exists() else header
    block = f"<!-- bench:{name} -->\n{text.rstrip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->",
                         re.DOTALL)
    updated = (pattern.sub(lambda _: block, current) if pattern.search(current)
               else current.rstrip() + "\n\n" + block + "\n")
    doc.write_text(updated)
    return doc


def line_chart(name: str, title: str, xlabel: str, ylabel: str,
               series: Dict[str, List[tuple]], logx: bool = False, limit: float = 0.0) -> str:
    """A PNG chart ``docs/img/<name>.png`` of ``series`` ({label: [(x, y)]}); returns
    the Markdown that shows it. ``limit``: a dashed goal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMAGES.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for label, points in series.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=label)
    if limit:
        ax.axhline(limit, linestyle="--", color="grey", label=f"goal {limit:g}")
    if logx:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMAGES / f"{name}.png")
    plt.close(fig)
    return f"![{title}](img/{name}.png)"


def bar_chart(name: str, title: str, ylabel: str, groups: Dict[str, Dict[str, float]]) -> str:
    """A grouped bar chart ``docs/img/<name>.png``: {group: {bar label: value}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMAGES.mkdir(parents=True, exist_ok=True)
    labels = sorted({bar for bars in groups.values() for bar in bars})
    width = 0.8 / max(1, len(labels))
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for i, label in enumerate(labels):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [bars.get(label, 0) for bars in groups.values()], width, label=label)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels(list(groups))
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMAGES / f"{name}.png")
    plt.close(fig)
    return f"![{title}](img/{name}.png)"


def rendezvous_section(results: List[dict]) -> Path:
    """bench/rendezvous_scale.py's results: a table and charts against N."""
    keys = ["filesystem", "members", "discover_p50_s", "discover_p99_s", "abort_p99_s",
            "fs_ops_per_member_per_s", "watcher_ops_per_s"]
    table = markdown_table([keys] + [[r[k] for k in keys] for r in results])
    by_fs: Dict[str, List[dict]] = {}
    for result in results:
        by_fs.setdefault(result["filesystem"], []).append(result)
    latency = line_chart(
        "rendezvous-latency", "Rendezvous latency (p99) against members", "members",
        "seconds", {f"{m} p99 ({fs})": [(r["members"], r[f"{m}_p99_s"]) for r in rs]
                    for fs, rs in by_fs.items() for m in ("discover", "abort")},
        logx=True, limit=2.0)
    ops = line_chart(
        "rendezvous-ops", "File operations per member and second", "members", "operations/s",
        {fs: [(r["members"], r["fs_ops_per_member_per_s"]) for r in rs]
         for fs, rs in by_fs.items()}, logx=True, limit=2.0)
    text = f"""## Rendezvous at scale (`bench/rendezvous_scale.py`)

N members (threads in 4 processes running the runtime's own rendezvous code and timing)
on a local directory and on the caching test file system (`ci/clusters/cachefs`: every
process on its own NFS-like client). Goals at N = 1,000: `discover_p99_s` <= 2,
`abort_p99_s` <= 2, `fs_ops_per_member_per_s` <= 2.

Machine: {machine()}.

{table}

{latency}

{ops}
"""
    return update_section("rendezvous", text)
