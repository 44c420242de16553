"""The golden YARN job of the render tests: its spec, the skein specification it
gives, and ``golden()`` planning it without a cluster."""

from __future__ import annotations

from pathlib import Path

from mxbatch.jobs import submit as jobs
from mxbatch.runtime.roles import Role
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

SCHEDULER, SERVER, WORKER = Role.SCHEDULER, Role.SERVER, Role.WORKER

SPEC = """\
name: golden
command: python3 train.py
resources: {cpus: 2, memory: 4G, walltime: 2h}
roles:
  server: {count: 1}
  worker: {count: 3, resources: {gpus: 1}}
rendezvous: {dir: /shared/runs}
container: {image: "registry.example/mxnet:1.9.1", mounts: ["/data:/data:ro", "/venv:/venv"]}
backends:
  yarn: {queue: ml, node_label: gpu, tags: [Team-A]}
"""

GOLDEN_HEAD = """\
name: golden-00000001
queue: ml
node_label: gpu
tags:
- mxbatch
- mxbatch-job-golden-00000001
- team-a
max_attempts: 1
master:
  resources:
    memory: 512
    vcores: 1
services:
"""

GOLDEN_WORKER = """\
  worker:
    instances: 3
    max_restarts: 0
    resources:
      memory: 4096
      vcores: 2
      gpus: 1
    files:
      runtime.pyz:
        source: /shared/runs/golden-00000001/runtime.pyz
        type: file
      plan.json:
        source: /shared/runs/golden-00000001/yarn/plan.json
        type: file
      mxbatch-env.sh:
        source: /shared/runs/golden-00000001/yarn/mxbatch-env.sh
        type: file
      workdir:
        source: {workdir}
        type: file
    env:
      MXBATCH_JOB_ID: golden-00000001
      YARN_CONTAINER_RUNTIME_TYPE: docker
      YARN_CONTAINER_RUNTIME_DOCKER_IMAGE: registry.example/mxnet:1.9.1
      YARN_CONTAINER_RUNTIME_DOCKER_CONTAINER_NETWORK: host
      YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS: /data:/data:ro,/venv:/venv:rw
    script: |
      # mxbatch job golden-00000001: container worker_<i> runs task 2+i (worker[i])
      set -e
      i=${{SKEIN_CONTAINER_ID##*_}}
      if [ "$i" -ge 3 ]; then
        echo "mxbatch: container $SKEIN_CONTAINER_ID: the job has only 3 worker task(s)" >&2
        exit 2
      fi
      ln -sfn "${{LOG_DIRS%%,*}}" logs
      . ./mxbatch-env.sh
      status=0
      /venv/bin/python runtime.pyz run . --task $((2 + i)) --kv-store mxbatch.backends.yarn_kv:container_store || status=$?
      if [ "$status" -gt 128 ]; then
        echo "mxbatch: the supervisor was killed by signal $((status - 128)); waiting up to 75s for the job to end" >&2
        sleep 75
      fi
      exit "$status"
"""


def golden(tmp_path: Path, text: str = SPEC):
    spec = specs.parse(text, tmp_path / "golden.yaml")
    backend = jobs.backend_for_spec(spec, "yarn")
    plan = planning.make(spec, "yarn", job_id="golden-00000001", created_at=0,
                         python="/venv/bin/python")
    return backend, plan
