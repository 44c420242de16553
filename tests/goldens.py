"""What the render tests of every batch backend share: a golden spec planned without a
cluster, with a fixed job id, creation time and Python, so its scripts can be compared
with golden text."""

from __future__ import annotations

import json
from pathlib import Path

from mxbatch.backends.batch.jobscript import role_groups
from mxbatch.jobs import submit as jobs
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

JOB_ID = "golden-00000001"
PYTHON = "/venv/bin/python"


def golden_spec(backend_name: str, *, walltime: str, worker_gpus: int, block: str) -> str:
    """The golden job (1 scheduler, 1 server, 3 workers with GPUs) with ``block`` as the
    lines of its ``backends.<backend_name>`` block; ``RUNS`` for the run directory."""
    return ("name: golden\ncommand: python3 train.py\n"
            f"resources: {{cpus: 2, memory: 4G, walltime: {walltime}}}\n"
            "roles:\n  server: {count: 1}\n"
            f"  worker: {{count: 3, resources: {{gpus: {worker_gpus}}}}}\n"
            f"rendezvous: {{dir: RUNS}}\nbackends:\n  {backend_name}:\n"
            + "".join(f"    {line}\n" for line in block.strip().splitlines()))


def golden_plan(tmp_path: Path, backend_name: str, text: str, *, runs: str = "/shared/runs",
                options: str = ""):
    """``text`` (a spec whose last block is ``backends.<backend_name>:``, with ``RUNS``
    where its rendezvous directory goes) with ``options`` as more lines of that block,
    parsed, checked by the backend and planned; returns (backend, plan)."""
    text = text.replace("RUNS", json.dumps(runs.replace("$", "$$"))) + "".join(  # literal
        f"    {line}\n" for line in options.splitlines())
    spec = specs.parse(text, tmp_path / "golden.yaml")
    backend = jobs.backend_for_spec(spec, backend_name)
    plan = planning.make(spec, backend_name, job_id=JOB_ID, created_at=0, python=PYTHON)
    backend.check(plan)
    return backend, plan


def group(plan, role: str):
    """The array-job group of ``role`` in ``plan``."""
    return [g for g in role_groups(plan.run) if g.role.value == role][0]


def render_text(cli, tmp_path: Path, backend_name: str, text: str, env=None):
    """``mxbatch render --backend <backend_name>`` of spec ``text`` (written to
    ``tmp_path/job.yaml``); returns (the spec's path, the finished process)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    return spec, cli.run("render", "--backend", backend_name, str(spec), env=env)
