"""Real MXNet jobs through the real SGE test cluster (ci/clusters/sge-up.sh), both submitters:
success, GPU requests SGE's consumables accept, a rejected native spec. The crash, the
starved queue and cancel run for SGE and Slurm alike in tests/test_batch.py. Durations come
from the job's own records (a loaded machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .clusterjobs import (
    example_spec,
    run_dir_of,
    sge_queued,
    wait_queue_empty,
)
from .conftest import Cli, assert_no_processes
from .test_mxnet_local import assert_trained

pytestmark = [pytest.mark.sge, pytest.mark.mxnet]



def spec_file(tmp_path: Path, *, submitter: str, native: str = "", startup: str = "5m",
              name: str = "sge-mlp", options: str = "", roles: str = "",
              memory: str = "4G") -> Path:
    options = f"submitter: {submitter}" + (f", native: {native}" if native else "") + \
        (f", {options}" if options else "")
    return example_spec(tmp_path, "sge", options, name=name, startup=startup, roles=roles,
                        memory=memory)


def assert_queue_empty(cli: Cli, job: str, timeout: float = 30.0) -> None:
    wait_queue_empty(lambda: sge_queued(cli, job), job, timeout)


@pytest.mark.parametrize("submitter", ["drmaa", "qsub"])
def test_example_job_runs_on_sge(sge, tmp_path, submitter):
    spec = spec_file(tmp_path, submitter=submitter)
    result = sge.run("submit", "--backend", "sge", "--wait", str(spec), env={"EPOCHS": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    record = (sge.home / "jobs" / f"{job}.json").read_text()
    assert f'"submitter": "{submitter}"' in record
    assert sge.status(job)["state"] == "SUCCEEDED"
    assert_queue_empty(sge, job)
    assert_no_processes(job)


@pytest.mark.parametrize("resource,consumable", [("gpu", "slot"), ("gpuj", "job")])
def test_gpu_requests_fit_sges_consumables(sge, tmp_path, resource, consumable):
    """Two workers with 2 cpus and 2 GPUs each on a host with 4 of each complex: -l gpu=1
    per slot (SGE debits 2 a worker), or -l gpuj=2 once each for a JOB consumable. The
    old -pe smp 2 -l gpu=2 asked for 4 a worker: the second never started."""
    roles = "  server: {count: 1}\n  worker: {count: 2, resources: {cpus: 2, gpus: 2}}\n"
    spec = spec_file(tmp_path, submitter="qsub", name=f"sge-gpu-{consumable}", roles=roles,
                     options=f"gpu_resource: {resource}, gpu_consumable: {consumable}",
                     startup="3m", memory="8G")
    result = sge.run("submit", "--backend", "sge", "--wait", str(spec), env={"EPOCHS": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    script = (run_dir_of(sge, job) / "jobs" / "worker.sh").read_text()
    request = "gpu=1" if consumable == "slot" else "gpuj=2"
    assert f"#$ -pe smp 2\n#$ -l h_vmem=4096M\n#$ -l {request}\n" in script
    assert_queue_empty(sge, job)
    assert_no_processes(job)





@pytest.mark.parametrize("submitter", ["drmaa", "qsub"])
def test_rejected_native_spec_exits_2_with_sges_reason(sge, tmp_path, submitter):
    spec = spec_file(tmp_path, submitter=submitter, native="[-q, nosuchqueue]",
                     name=f"sge-rejected-{submitter}")
    result = sge.run("submit", "--backend", "sge", str(spec))
    assert result.returncode == 2
    assert 'SGE rejected the job' in result.stderr and "nosuchqueue" in result.stderr
    assert not sge_queued(sge, f"sge-rejected-{submitter}")
    assert sge.run_dirs() == []
