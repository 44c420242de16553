"""Real MXNet jobs through the real Slurm test cluster (ci/clusters/slurm-up.sh: a slurmd in
each namespace test host, so tasks run on distinct IPs): arrays and a heterogeneous job, the
addresses roles advertise, a rejected partition (the crash, the starved partition and
cancel: tests/test_batch.py, for SGE and Slurm alike). Durations come from the job's own
records (a loaded machine)."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from pathlib import Path

import pytest

from .clusterjobs import (
    example_spec,
    run_dir_of,
    slurm_jobs,
    slurm_queued,
    task_records,
    wait_queue_empty,
)
from .conftest import Cli, assert_no_processes, cluster_environment
from .test_mxnet_local import assert_trained

pytestmark = [pytest.mark.slurm, pytest.mark.mxnet]



def spec_file(tmp_path: Path, options: str = "", *, name: str = "slurm-mlp",
              startup: str = "5m", command: str = "") -> Path:
    # the test nodes advertise 4096 MB: ask for 1G per task
    return example_spec(tmp_path, "slurm", options, name=name, startup=startup, memory="1G",
                        command=command)


def nodes_used(cli: Cli, job: str) -> set:
    """Node names Slurm ran the job's tasks on."""
    nodes = set()
    for line in slurm_jobs(cli, job):
        listing = re.search(r" NodeList=(\S+)", line).group(1)
        expanded = subprocess.run(["scontrol", "show", "hostnames", listing],
                                  capture_output=True, text=True, env=cli.env).stdout
        nodes.update(expanded.split())
    return nodes


@pytest.mark.parametrize("het", [False, True], ids=["arrays", "heterogeneous"])
def test_example_job_runs_on_slurm_across_nodes(slurm, tmp_path, het):
    spec = spec_file(tmp_path, f"het: {str(het).lower()}", name=f"slurm-{'het' if het else 'arr'}")
    result = slurm.run("submit", "--backend", "slurm", "--wait", str(spec), env={"EPOCHS": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    assert slurm.status(job)["state"] == "SUCCEEDED"
    assert len(nodes_used(slurm, job)) >= 2
    wait_queue_empty(lambda: slurm_queued(slurm, job), job, 30)
    assert_no_processes(job)


#: prints the address the role advertises, then runs the example's training
SHOW_NODE_HOST = ("[sh, -c, 'echo \"node host: $DMLC_NODE_HOST\"; "
                  "exec python3 train_mlp.py --kvstore dist_sync']")


def test_roles_advertise_their_own_host_addresses(slurm, tmp_path):
    """Each slurmd is a test host with its own address and no default route: the
    scheduler advertises its host's address, servers and workers theirs (DMLC_NODE_HOST),
    and the job trains across at least two of them."""
    spec = spec_file(tmp_path, name="slurm-addr", command=SHOW_NODE_HOST)
    result = slurm.run("submit", "--backend", "slurm", "--wait", str(spec), env={"EPOCHS": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    job = result.stdout.split()[0]
    run_dir = run_dir_of(slurm, job)
    subnet = ipaddress.ip_network(cluster_environment("hosts")["MXBATCH_TEST_SUBNET"])
    advertised = {}
    for log in (run_dir / "logs").glob("*-[0-9].log"):
        if log.name.startswith("scheduler"):
            continue
        found = re.findall(r"^node host: (\S+)$", log.read_text(), re.MULTILINE)
        assert found, f"{log} does not say its address"
        advertised[log.stem] = found[-1]
    assert len(advertised) == 4, advertised
    assert all(ipaddress.ip_address(a) in subnet for a in advertised.values()), advertised
    assert len(set(advertised.values())) >= 2, advertised
    scheduler = json.loads((run_dir / "scheduler.json").read_text())
    assert ipaddress.ip_address(scheduler["ip"]) in subnet, scheduler
    hosts = {r["host"] for r in task_records(run_dir)}
    assert len(hosts) >= 2 and hosts <= {"mxbh1", "mxbh2", "mxbh3"}, hosts
    wait_queue_empty(lambda: slurm_queued(slurm, job), job, 30)
    assert_no_processes(job)





def test_rejected_partition_exits_2_with_slurms_reason(slurm, tmp_path):
    spec = spec_file(tmp_path, "partition: nosuchpartition", name="slurm-rejected")
    result = slurm.run("submit", "--backend", "slurm", str(spec))
    assert result.returncode == 2
    assert "Slurm rejected the job" in result.stderr
    assert re.search(r"[Ii]nvalid partition", result.stderr)
    assert not slurm_queued(slurm, "slurm-rejected")
    assert slurm.run_dirs() == []
