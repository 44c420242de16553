"""Helpers shared by the real-cluster tests (SGE, Slurm): the example job as a spec file
for a backend, and polling the queue until a job has left it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List

from .conftest import copy_example, wait_for


def example_spec(tmp_path: Path, backend: str, options: str, *, name: str,
                 startup: str = "5m", memory: str = "4G") -> Path:
    """examples/mlp-ps.yaml renamed, with ``backends.<backend>: {options}`` added, in a
    temporary directory with its training script (the roles' workdir)."""
    text = copy_example(tmp_path / f"{name}-workdir").read_text()
    text = text.replace("name: mlp-ps", f"name: {name}")
    text = text.replace("workdir: .", f"workdir: {tmp_path / (name + '-workdir')}")
    text = text.replace("startup_timeout: 5m", f"startup_timeout: {startup}")
    text = text.replace("memory: 4G", f"memory: {memory}")
    text += f"backends:\n  {backend}: {{{options}}}\n"
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def wait_queue_empty(queued: Callable[[], List[str]], job: str, timeout: float) -> None:
    wait_for(lambda: not queued(), timeout, f"{job} to leave the queue")
