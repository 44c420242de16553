"""A Gluon MLP trained with dist_sync that survives restarts (docs/long-jobs.md).

    mxbatch submit --wait examples/resume-ps.yaml

It checkpoints at the end of every epoch, and at once when mxbatch sends the checkpoint
signal (``restarts.checkpoint_signal``, SIGUSR1 by default: preemption, walltime), and
resumes from the checkpoint when ``MXBATCH_ATTEMPT`` > 0. The same file runs for every
role: for the scheduler and servers ``import mxnet`` itself runs the role.

The pattern, for any training script:

- **one checkpoint, shared**: worker rank 0 writes it (parameters, optimizer states,
  where it was) into ``--checkpoint-dir`` on storage every worker's host sees, by
  temporary files and a rename, so a kill never leaves half of one;
- **resume**: on ``MXBATCH_ATTEMPT`` > 0 every worker loads it before its first step
  (``net.load_parameters``, ``trainer.load_states``) and goes on from the batch after
  the last one it holds: every batch's update is applied exactly once;
- **the signal**: a handler only sets a flag; after each step the workers add their
  flags up through the kvstore (one number), so they all stop after the same step,
  rank 0 saves, and they exit together (a worker that stopped alone would leave the
  others blocked in a push);
- ``update_on_kvstore=False``: the optimizer states stay in each worker (the same on
  all, dist_sync), so ``trainer.save_states`` can save them; with updates on the
  servers MXNet cannot save them at all ("Cannot save states for distributed
  training").

The Module API (``mod.fit``) does the same with ``--model-prefix`` and ``--load-epoch``
of MXNet's own image-classification examples: see docs/long-jobs.md.

Options: ``--epochs``, ``--checkpoint-dir`` (default ``$CHECKPOINT_DIR`` or
``./checkpoint``), ``--checkpoint-signal`` (default SIGUSR1). Test hooks
(environment): ``STEP_SLEEP`` slows every step (seconds); ``PRINT_EVERY`` (default 10):
a progress line every so many steps; ``FAIL_AT_STEP`` (with ``FAIL_RANK``, default 1):
that worker raises after that many steps of attempt 0 (a crash during training), or,
with ``FAIL_AT_STEP=0``, before it creates its kvstore (a start-up failure). The first
step of each attempt prints its time.
"""

import argparse
import json
import os
import signal
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

#: the kvstore key the workers add their stop flags up in (the Trainer uses 0..N-1)
STOP_KEY = 9999
SAMPLES, DIM, CLASSES = 8192, 32, 4


def synthetic_data(rank: int, workers: int):
    """The same labelled data set on every worker (seed 0), sharded by rank."""
    rng = np.random.RandomState(0)
    teacher = rng.randn(DIM, CLASSES)
    features = rng.randn(SAMPLES, DIM).astype("float32")
    labels = (features @ teacher + 0.1 * rng.randn(SAMPLES, CLASSES)).argmax(1).astype("float32")
    return features[rank::workers], labels[rank::workers]


def batches(features, labels, epoch: int, batch_size: int):
    """The epoch's batches in an order fixed by the epoch (so a resumed epoch skips
    exactly the batches already done)."""
    order = np.random.RandomState(1000 + epoch).permutation(len(features))
    for start in range(0, len(order) - batch_size + 1, batch_size):
        take = order[start:start + batch_size]
        yield mx.nd.array(features[take]), mx.nd.array(labels[take])


class Checkpoint:
    """The job's one checkpoint: ``model.params``, ``trainer.states``, ``progress.json``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.progress_path = os.path.join(directory, "progress.json")

    def load_progress(self):
        try:
            with open(self.progress_path) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def save(self, net, trainer, progress) -> None:
        os.makedirs(self.directory, exist_ok=True)
        for name, write in (("model.params", net.save_parameters),
                            ("trainer.states", trainer.save_states)):
            tmp = os.path.join(self.directory, ".%s.tmp" % name)
            write(tmp)
            os.replace(tmp, os.path.join(self.directory, name))
        tmp = self.progress_path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(progress, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.progress_path)  # last: it names a complete checkpoint

    def restore(self, net, trainer) -> None:
        net.load_parameters(os.path.join(self.directory, "model.params"))
        trainer.load_states(os.path.join(self.directory, "trainer.states"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvstore", default="dist_sync")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", 5)))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint-dir",
                        default=os.environ.get("CHECKPOINT_DIR", "checkpoint"))
    parser.add_argument("--checkpoint-signal", default="SIGUSR1")
    args = parser.parse_args()

    stop_requested = []
    signal.signal(signal.Signals[args.checkpoint_signal],
                  lambda signum, frame: stop_requested.append(signum))

    attempt = int(os.environ.get("MXBATCH_ATTEMPT", "0"))
    if os.environ.get("FAIL_AT_STEP") == "0" and \
            os.environ.get("MXBATCH_RANK") == os.environ.get("FAIL_RANK", "1"):
        raise RuntimeError("FAIL_AT_STEP=0: failing before the kvstore exists")
    kv = mx.kv.create(args.kvstore)
    rank, workers = kv.rank, kv.num_workers
    tag = f"[worker rank={rank}]"
    print(f"{tag} kvstore={kv.type} rank={rank} num_workers={workers} attempt={attempt} "
          f"restart_reason={os.environ.get('MXBATCH_RESTART_REASON', '')}", flush=True)

    features, labels = synthetic_data(rank, workers)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(CLASSES))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, DIM)))  # parameters get their shapes (to load into)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kv,
                            update_on_kvstore=False)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    kv.init(STOP_KEY, mx.nd.zeros(1))
    stop_sum = mx.nd.zeros(1)

    checkpoint = Checkpoint(args.checkpoint_dir)
    progress = {"epoch": 0, "batch": 0, "steps": 0, "epoch_steps": {}, "resumed": []}
    saved = checkpoint.load_progress() if attempt > 0 else None
    if saved is not None:
        checkpoint.restore(net, trainer)
        progress = saved
        progress["resumed"].append({"attempt": attempt, "steps": saved["steps"]})
        print(f"{tag} resumed from the checkpoint: epoch {saved['epoch']} batch "
              f"{saved['batch']} ({saved['steps']} steps)", flush=True)
    elif attempt > 0:
        print(f"{tag} attempt {attempt}: no checkpoint in {args.checkpoint_dir}: "
              "starting over", flush=True)

    step_sleep = float(os.environ.get("STEP_SLEEP", 0))
    fail_at = int(os.environ.get("FAIL_AT_STEP", 0)) \
        if attempt == 0 and rank == int(os.environ.get("FAIL_RANK", 1)) else 0
    print_every = int(os.environ.get("PRINT_EVERY", 10))
    first_step = True
    for epoch in range(progress["epoch"], args.epochs):
        skip = progress["batch"] if epoch == progress["epoch"] else 0
        total, count = 0.0, 0
        for index, (batch, label) in enumerate(batches(features, labels, epoch,
                                                       args.batch_size)):
            if index < skip:
                continue
            with autograd.record():
                loss = loss_fn(net(batch), label)
            loss.backward()
            trainer.step(batch.shape[0])
            total += loss.mean().asscalar()
            count += 1
            progress["steps"] += 1
            progress["epoch"], progress["batch"] = epoch, index + 1
            done = progress["epoch_steps"]
            done[str(epoch)] = done.get(str(epoch), 0) + 1
            if first_step:
                first_step = False
                print(f"{tag} first step of attempt {attempt} at {time.time():.3f}",
                      flush=True)
            if progress["steps"] == 1 or progress["steps"] % print_every == 0:
                print(f"{tag} step {progress['steps']} epoch {epoch} batch {index + 1}",
                      flush=True)
            if step_sleep:
                time.sleep(step_sleep)
            if progress["steps"] == fail_at:
                raise RuntimeError(f"{tag} FAIL_AT_STEP: failing after step {fail_at}")
            # every worker learns whether any was asked to stop, after the same step
            kv.push(STOP_KEY, mx.nd.array([1.0 if stop_requested else 0.0]))
            kv.pull(STOP_KEY, out=stop_sum)
            if stop_sum.asscalar() > 0:
                if rank == 0:
                    checkpoint.save(net, trainer, progress)
                print(f"{tag} checkpoint signal: saved after step {progress['steps']} "
                      f"(epoch {epoch} batch {index + 1}); exiting", flush=True)
                return
        progress["epoch"], progress["batch"] = epoch + 1, 0
        if rank == 0:
            checkpoint.save(net, trainer, progress)
        print(f"{tag} epoch {epoch} loss {total / max(count, 1):.4f} checkpoint saved",
              flush=True)
    if rank == 0:
        with open(os.path.join(args.checkpoint_dir, "final.json"), "w") as handle:
            json.dump(progress, handle)
    print(f"{tag} done after {progress['steps']} steps; steps per epoch "
          f"{json.dumps(progress['epoch_steps'], sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
