"""A real MXNet job (issue 21): MXNet's kv.rank equals mxbatch's rank (each member's
supervisor chooses its port, and ps-lite ranks the nodes of one host by port), status
shows the same kv.rank, and MXNet's Speedometer lines feed each worker's throughput."""

from __future__ import annotations

import re

import pytest

from mxbatch.backends.psrank import kv_ranks

from .conftest import assert_no_processes

pytestmark = pytest.mark.mxnet


def test_kv_rank_is_mxbatch_rank_and_speedometer_lines_feed_status(cli, example):
    result = cli.run("launch", "-n", "3", "-s", "1", "--", "python3", "train_mlp.py",
                     "--kvstore", "dist_sync", "--epochs", "2", "--speedometer", "5",
                     cwd=example.parent, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    job = result.stdout.split()[0]
    seen = re.findall(r"^worker\[(\d)\] +\| \[worker rank=(\d)\] kvstore=dist_sync rank=\d "
                      r"num_workers=3 mxbatch_rank=(\d)$", result.stdout, re.M)
    assert sorted(seen) == [("0", "0", "0"), ("1", "1", "1"), ("2", "2", "2")], seen
    assert re.search(r"^worker\[\d\] +\| Iter\[\d\] Batch \[\d+\]\tSpeed: [\d.]+ samples/sec$",
                     result.stdout, re.M), result.stdout[-2000:]
    status = cli.status(job)
    workers = [t for t in status["tasks"] if t["role"] == "worker"]
    assert [t["kv_rank"] for t in workers] == [0, 1, 2]
    assert all(t["metrics"]["samples_per_sec"] > 0 for t in workers), workers
    assert status["samples_per_sec"] > 0
    assert_no_processes(job)


def test_ps_lite_order_across_hosts():
    """Hosts by address as a string, from the greatest; on one host, by port."""
    assert kv_ranks([("worker[0]", "10.1.0.9:9100"), ("worker[1]", "10.1.0.10:9200"),
                     ("worker[2]", "10.1.0.9:9050"), ("worker[3]", "10.1.0.10:9000")]) == {
        "worker[2]": 0, "worker[0]": 1, "worker[3]": 2, "worker[1]": 3}
    assert kv_ranks([("worker[0]", "10.1.0.9:9100"), ("worker[1]", "")]) == {}
