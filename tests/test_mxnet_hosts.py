"""Real MXNet dist_sync jobs across the 4 namespace test hosts (ci/clusters/hosts-up.sh)
through the ssh and MPI backends, launch.py's documented example line as written, a job
whose hosts share no storage, and a worker raising mid-training."""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path

import pytest

from .conftest import EXAMPLES, Cli, assert_no_processes
from .hostjobs import abort_record, host_addresses, last_end, records, remote_temp_dirs

pytestmark = pytest.mark.mxnet
EXAMPLE = "image_classification.py"
ARGS = ["--dataset", "cifar10", "--model", "vgg11", "--epochs", "1", "--kvstore", "dist_sync"]


def workdir(directory: Path, hostfile: str) -> Path:
    """The example and a hostfile called ``hosts``, as launch.py's documentation has them."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / EXAMPLE, directory / EXAMPLE)
    shutil.copy(hostfile, directory / "hosts")
    return directory


def worker_lines(output: str):
    """{kv rank: (num_workers, DMLC_NODE_HOST)} from the example's worker lines."""
    return {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r"\[worker rank=(\d+)\] kvstore=dist_sync rank=\d+ num_workers=(\d+) host=(\S+)",
        output)}


def role_addresses(run_dir: Path):
    """{task: DMLC_NODE_HOST} from every task's supervisor note."""
    found = {}
    for log in (run_dir / "logs").glob("*-*.log"):
        match = re.search(r"starting on \S+ with DMLC_NODE_HOST=(\S+):", log.read_text())
        if match:
            found[log.stem] = match.group(1)
    return found


def assert_spread(result, cli, hosts_env, workers: int) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    job = result.stdout.split()[0]
    seen = worker_lines(result.stdout)
    assert sorted(seen) == list(range(workers))
    assert {n for n, _ in seen.values()} == {workers}
    addresses = set(host_addresses(hosts_env)[h] for h in hosts_env["MXBATCH_TEST_HOST_NAMES"]
                    .split())
    roles = role_addresses(cli.run_dir(job))
    assert len(roles) == 1 + 2 * workers
    assert set(roles.values()) == addresses  # every role on a test host, all 4 used
    assert len({host for _, host in seen.values()}) == workers  # workers on distinct hosts
    # across hosts ps-lite's order of the hosts' addresses decides kv.rank: status says it
    printed = {f"worker[{m.group(1)}]": int(m.group(2)) for m in re.finditer(
        r"^worker\[(\d+)\] +\| \[worker rank=(\d+)\] kvstore=", result.stdout, re.M)}
    told = {t["role"] + f"[{t['rank']}]": t["kv_rank"] for t in cli.status(job)["tasks"]
            if t["role"] == "worker"}
    assert told == printed, (told, printed)
    assert_no_processes(job, timeout=10)
    assert remote_temp_dirs(job) == []
    return job


@pytest.mark.ssh
def test_launch_py_example_line_runs_as_written(hosts_cli, hosts_env, tmp_path):
    """launch.py's first documented example with ``launch.py`` replaced by ``mxbatch
    launch``, nothing else: -n 3 workers (and 3 servers) on the hosts of ./hosts."""
    cwd = workdir(tmp_path / "example", hosts_env["MXBATCH_TEST_HOSTFILE"])
    result = hosts_cli.run("launch", "-n", "3", "-H", "hosts", "--launcher", "ssh", "python",
                           EXAMPLE, *ARGS, cwd=cwd, timeout=400)
    assert_spread(result, hosts_cli, hosts_env, workers=3)


@pytest.mark.ssh
def test_dist_sync_over_ssh_without_shared_storage(hosts_env):
    """The work tree and MXBATCH_HOME in the submit host's private directory, which no host
    sees; --sync-dst-dir copies the work tree into each host's own private directory."""
    private = Path(hosts_env["MXBATCH_TEST_PRIVATE_DIR"]) / f"t-{secrets.token_hex(4)}"
    try:
        cli = Cli(private / "home", base_env=hosts_env)
        cwd = workdir(private / "src", hosts_env["MXBATCH_TEST_HOSTFILE"])
        dst = private / "dst"
        result = cli.run("launch", "-n", "2", "-H", "hosts", "--launcher", "ssh",
                         "--sync-dst-dir", str(dst), "python", EXAMPLE, *ARGS, cwd=cwd,
                         timeout=400)
        assert_spread(result, cli, hosts_env, workers=2)
        state = Path(hosts_env["MXBATCH_TEST_HOST_MAP"]).parent.parent
        relative = dst.relative_to(hosts_env["MXBATCH_TEST_PRIVATE_DIR"])
        for host in hosts_env["MXBATCH_TEST_HOST_NAMES"].split():  # each host's own copy
            assert (state / host / "private" / relative / EXAMPLE).is_file()
    finally:
        shutil.rmtree(private, ignore_errors=True)
        for host in hosts_env["MXBATCH_TEST_HOST_NAMES"].split():
            shutil.rmtree(Path(hosts_env["MXBATCH_TEST_HOST_MAP"]).parent.parent / host
                          / "private" / private.name, ignore_errors=True)


@pytest.mark.mpi
def test_dist_sync_with_one_mpirun(hosts_cli, hosts_env, tmp_path):
    cwd = workdir(tmp_path / "example", hosts_env["MXBATCH_TEST_HOSTFILE"])
    result = hosts_cli.run("launch", "-n", "2", "-H", "hosts", "--launcher", "mpi", "python",
                           EXAMPLE, *ARGS, cwd=cwd, timeout=400)
    assert_spread(result, hosts_cli, hosts_env, workers=2)


@pytest.mark.ssh
def test_worker_raising_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    cwd = workdir(tmp_path / "example", hosts_env["MXBATCH_TEST_HOSTFILE"])
    env = {"CRASH_RANK": "1", "CRASH_AFTER_STEPS": "3", "STEP_SLEEP": "0.2", "EPOCHS": "20"}
    result = hosts_cli.run("launch", "-n", "2", "-H", "hosts", "--grace", "5s", "python",
                           EXAMPLE, "--kvstore", "dist_sync", cwd=cwd, env=env, timeout=400)
    assert result.returncode == 1
    assert "RuntimeError: simulated crash on worker rank 1" in result.stdout
    assert re.search(r"FAILED: worker\[\d\] exited with code 1", result.stderr)
    job = result.stdout.split()[0]
    run_dir = hosts_cli.run_dir(job)
    failed = [r for r in records(run_dir).values() if r["state"] == "FAILED"]
    assert len(failed) == 1 and failed[0]["host"] in hosts_env["MXBATCH_TEST_HOST_NAMES"]
    assert abort_record(run_dir)["at"] - failed[0]["ended_at"] < 2
    assert last_end(run_dir) - failed[0]["ended_at"] < 15
    assert_no_processes(job, timeout=10)
    assert remote_temp_dirs(job) == []
