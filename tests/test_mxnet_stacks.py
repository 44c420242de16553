"""The uneven-batch deadlock of apache/mxnet#7888 for real (MXNet 1.9.1, gluon,
dist_sync, 1 server, 2 workers, the local backend), diagnosed from measured facts
only (issue 36): where the blocked worker is, from its stack dump, and how many
batches each worker pushed, counted by the role hook at the kvstore.

The kv rank 0 worker trains two batches more than the other: its first extra push is
never answered, so it blocks reading the weights that push's pull writes (``asscalar``
of its next loss, in MXNet's ``asnumpy``), while the other worker's code has finished
(it then hangs at exit, in ``KVStore.__del__``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mxbatch.runtime.layout import RunLayout

from .conftest import assert_no_processes, task_record

pytestmark = pytest.mark.mxnet

UNEVEN = '''\
"""A tiny gluon dist_sync job whose kv rank 0 trains EXTRA batches more than the others."""
import sys

import mxnet as mx
from mxnet import autograd, gluon, nd

kv = mx.kv.create("dist_sync")
steps = 4 + (int(sys.argv[1]) if kv.rank == 0 else 0)
net = gluon.nn.Dense(1)
net.initialize(mx.init.Constant(0.5))
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
x, y = nd.ones((4, 3)), nd.ones((4, 1))
for step in range(steps):
    with autograd.record():
        loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    trainer.step(4)
    print("[worker rank=%d] step %d loss %.4f" % (kv.rank, step, loss.asscalar()), flush=True)
print("[worker rank=%d] done after %d steps" % (kv.rank, steps), flush=True)
'''
LOSS_LINE = next(i for i, line in enumerate(UNEVEN.splitlines(), 1) if "asscalar" in line)
EXIT_TIMEOUT = 6


def test_the_uneven_batch_deadlock_names_where_the_worker_blocks_and_the_counted_batches(
        cli, tmp_path):
    (tmp_path / "uneven.py").write_text(UNEVEN)
    result = cli.run("launch", "-n", "2", "-s", "1", "--grace", "3s", "--exit-timeout",
                     f"{EXIT_TIMEOUT}s", "--", "python3", "uneven.py", "2", cwd=tmp_path,
                     timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    found = re.search(
        r"FAILED: worker\[(\d)\] finished; worker\[(\d)\] blocked (\d+)s in MXNet "
        r"\(mxnet/ndarray/ndarray\.py:\d+ in asscalar\), "
        rf"from uneven\.py:{LOSS_LINE} in <module> \(print\(.*loss\.asscalar\(\)\), flush=True\)\) "
        rf"\(no CPU and no output; rendezvous\.exit_timeout {EXIT_TIMEOUT}s\); batches pushed "
        r"\(the most pushes of one kvstore key\): worker\[0\] (\d+), worker\[1\] (\d+): the "
        r"workers ran different numbers of batches", result.stderr)
    assert found, result.stderr[-3000:]
    finished, blocked = int(found.group(1)), int(found.group(2))
    assert {finished, blocked} == {0, 1} and int(found.group(3)) >= EXIT_TIMEOUT
    counted = {0: int(found.group(4)), 1: int(found.group(5))}
    # the counts are the batches each ran: the blocked one pushed its sixth batch's
    # gradients, then blocked reading that batch's loss (its fifth batch's push, the
    # first the other never matched, is still pending)
    assert f"[worker rank={blocked}] step 4 loss" in result.stdout
    assert f"[worker rank={blocked}] step 5 loss" not in result.stdout
    assert f"[worker rank={finished}] done after 4 steps" in result.stdout
    assert counted[blocked] == 6 and counted[finished] == 4, counted
    job = result.stdout.split()[0]
    run_dir = cli.run_dir(job)
    abort = json.loads(Path(RunLayout(str(run_dir)).abort).read_text())
    assert abort["end"] == "exit_hang" and abort["rank"] == blocked
    record = task_record(run_dir, "worker", blocked)
    frames = record["stack"]["frames"]
    assert frames[0]["path"].endswith("/mxnet/ndarray/ndarray.py")
    assert frames[0]["function"] == "asnumpy"
    assert (frames[2]["path"], frames[2]["line"]) == (str(tmp_path / "uneven.py"), LOSS_LINE)
    assert (record["pushes"], record["batches"]) == (12, 6)  # two parameters a batch
    assert_no_processes(job)
