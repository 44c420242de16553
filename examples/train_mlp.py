"""A small Gluon MLP trained on synthetic data through an MXNet parameter-server kvstore.

The same file runs for every role: for the scheduler and servers, ``import mxnet``
itself runs the role's loop and exits when the job ends; only workers train.

    python3 train_mlp.py [--kvstore dist_sync] [--epochs 5] [--lr 0.1] [--speedometer 20]

Every ``--speedometer`` batches a worker logs MXNet's Speedometer line
(``Speed: N samples/sec``), which mxbatch reads as the worker's throughput.

Test hooks (environment): ``CRASH_RANK`` + ``CRASH_AFTER_STEPS`` make that
worker raise after so many steps; ``STEP_SLEEP`` slows every step (seconds);
``LAUNCH_T0`` (epoch seconds) is the reference for the first-step timing line.
"""

import argparse
import logging
import os
import time

T_START = time.time()

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def synthetic_data(rank: int, workers: int, samples: int = 8192, dim: int = 32, classes: int = 4):
    """The same labelled data set on every worker (seed 0), sharded by rank."""
    rng = np.random.RandomState(0)
    teacher = rng.randn(dim, classes)
    features = rng.randn(samples, dim).astype("float32")
    labels = (features @ teacher + 0.1 * rng.randn(samples, classes)).argmax(1).astype("float32")
    return features[rank::workers], labels[rank::workers]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvstore", default="dist_sync")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", 5)))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1, help="SGD's learning rate")
    parser.add_argument("--speedometer", type=int, default=20,
                        help="log the training speed every N batches (0: never)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    kv = mx.kv.create(args.kvstore)
    rank, workers = kv.rank, kv.num_workers
    tag = f"[worker rank={rank}]"
    print(f"{tag} kvstore={kv.type} rank={rank} num_workers={workers} "
          f"mxbatch_rank={os.environ.get('MXBATCH_RANK')}", flush=True)

    features, labels = synthetic_data(rank, workers)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(features, labels),
                                   batch_size=args.batch_size, shuffle=True,
                                   last_batch="discard")
    mx.random.seed(42 + rank)  # different init per worker: the kvstore makes them equal
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.lr, "momentum": 0.9}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    crash_rank = os.environ.get("CRASH_RANK")
    crash_after = int(os.environ.get("CRASH_AFTER_STEPS", 10))
    step_sleep = float(os.environ.get("STEP_SLEEP", 0))
    launch_t0 = float(os.environ.get("LAUNCH_T0", T_START))
    speedometer = mx.callback.Speedometer(args.batch_size, args.speedometer or 1)
    steps = 0
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for batch, label in loader:
            if crash_rank == str(rank) and steps == crash_after:
                raise RuntimeError(f"simulated crash on worker rank {rank} after {steps} steps")
            with autograd.record():
                loss = loss_fn(net(batch), label)
            loss.backward()
            trainer.step(batch.shape[0])
            total += loss.mean().asscalar()
            batches += 1
            steps += 1
            if args.speedometer:
                speedometer(mx.model.BatchEndParam(epoch=epoch, nbatch=batches,
                                                   eval_metric=None, locals=None))
            if steps == 1:
                print(f"{tag} first step at {time.time() - launch_t0:.2f}s after launch",
                      flush=True)
            if step_sleep:
                time.sleep(step_sleep)
        print(f"{tag} epoch {epoch} loss {total / batches:.4f}", flush=True)
    print(f"{tag} done after {steps} steps", flush=True)


if __name__ == "__main__":
    main()
