"""Image classification through an MXNet parameter-server kvstore, small enough for CPUs.

The command line of MXNet's ``example/gluon/image_classification.py``, as launch.py's
documentation runs it::

    mxbatch launch -n 3 -H hosts --launcher ssh python image_classification.py \\
        --dataset cifar10 --model vgg11 --epochs 1 --kvstore dist_sync

No data set is downloaded: every worker trains on synthetic images of the data set's
shape (CIFAR: 3x32x32, 10 or 100 classes; MNIST: 1x28x28, 10), the same on every
worker (seed 0) and sharded by rank. The VGG models have the layer layout of VGG-11/13/
16/19 with every layer ``--width`` times narrower (default 16: a few hundred thousand
parameters), so a job of several workers on a few CPU cores takes seconds. Like the
original VGG (and gluon's ``vgg11``, not ``vgg11_bn``) they have no batch normalisation
unless ``--batch-norm`` asks for it (gluon's ``vgg11_bn``). With it and 3 servers, MXNet
1.9.1's dist_sync workers train to the end and then hang at exit, in ``KVStore.__del__``
(MXNet's exit hang: mxbatch ends them ``rendezvous.exit_timeout`` after their code
finished, and the job succeeds; docs/long-jobs.md).

``--uneven-batches N`` gives the worker of kv rank 0 N batches an epoch more than the
others (shards of different sizes, apache/mxnet#7888). With dist_sync its extra pushes
are never answered: with N = 1 and one epoch its code still ends (its last push left
pending) and every worker then hangs at exit; otherwise it waits forever in a kvstore
call once the others have finished (mxbatch names that deadlock).

The same file runs for every role: for the scheduler and servers ``import mxnet``
itself runs the role and exits when the job ends; only workers train. Each worker
prints ``[worker rank=R] kvstore=... rank=R num_workers=N host=DMLC_NODE_HOST``, the
time of its first step (after ``LAUNCH_T0``, epoch seconds, if set), each epoch's loss,
and ``done after S steps``. Test hooks: ``CRASH_RANK`` + ``CRASH_AFTER_STEPS`` make that
worker raise; ``STEP_SLEEP`` slows every step; ``EPOCHS`` is the default of ``--epochs``.
"""

import argparse
import os
import time

T_START = time.time()

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

#: the convolution layers of each VGG (numbers: output channels at full width; "M":
#: max-pooling), as in Simonyan & Zisserman (2014), configurations A, B, D, E
VGG_LAYERS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}
#: (channels, side, classes) of each data set's images
DATASETS = {"cifar10": (3, 32, 10), "cifar100": (3, 32, 100), "mnist": (1, 28, 10)}


def vgg(model: str, classes: int, width: int,
        batch_norm: bool = False) -> gluon.nn.HybridSequential:
    """A VGG of ``model``'s layout with every layer ``width`` times narrower (``batch_norm``:
    each convolution followed by batch normalisation, as gluon's ``vgg11_bn``)."""
    net = gluon.nn.HybridSequential()
    for layer in VGG_LAYERS[model]:
        if layer == "M":
            net.add(gluon.nn.MaxPool2D(pool_size=2, strides=2, ceil_mode=True))
        elif batch_norm:
            net.add(gluon.nn.Conv2D(max(4, layer // width), kernel_size=3, padding=1),
                    gluon.nn.BatchNorm(), gluon.nn.Activation("relu"))
        else:
            net.add(gluon.nn.Conv2D(max(4, layer // width), kernel_size=3, padding=1,
                                    activation="relu"))
    hidden = max(16, 4096 // width // 4)
    net.add(gluon.nn.Flatten(), gluon.nn.Dense(hidden, activation="relu"),
            gluon.nn.Dropout(0.5), gluon.nn.Dense(hidden, activation="relu"),
            gluon.nn.Dropout(0.5), gluon.nn.Dense(classes))
    return net


def synthetic_images(dataset: str, samples: int, rank: int, workers: int):
    """Images of ``dataset``'s shape whose class shows in their mean colour (so the
    loss can fall), the same on every worker, sharded by rank."""
    channels, side, classes = DATASETS[dataset]
    rng = np.random.RandomState(0)
    labels = rng.randint(0, classes, samples)
    images = rng.randn(samples, channels, side, side).astype("float32") * 0.5
    images += (labels / classes).astype("float32")[:, None, None, None]
    return images[rank::workers], labels[rank::workers].astype("float32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="cifar10")
    parser.add_argument("--model", choices=sorted(VGG_LAYERS), default="vgg11")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", 1)))
    parser.add_argument("--kvstore", default="dist_sync")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--width", type=int, default=16,
                        help="every layer this many times narrower than the real VGG")
    parser.add_argument("--samples", type=int, default=768,
                        help="synthetic images in the whole data set")
    parser.add_argument("--batch-norm", action="store_true",
                        help="batch normalisation after each convolution (vgg11_bn)")
    parser.add_argument("--uneven-batches", type=int, default=0, metavar="N",
                        help="kv rank 0 trains N batches an epoch more than the others")
    args = parser.parse_args()

    kv = mx.kv.create(args.kvstore)
    rank, workers = kv.rank, kv.num_workers
    tag = f"[worker rank={rank}]"
    print(f"{tag} kvstore={kv.type} rank={rank} num_workers={workers} "
          f"host={os.environ.get('DMLC_NODE_HOST', '?')} model={args.model} "
          f"dataset={args.dataset} (synthetic)", flush=True)

    images, labels = synthetic_images(args.dataset, args.samples, rank, workers)
    if rank == 0 and args.uneven_batches:  # its own images again, as a larger shard
        extra = args.uneven_batches * args.batch_size
        images, labels = np.concatenate([images, images[:extra]]), np.concatenate(
            [labels, labels[:extra]])
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(images, labels),
                                   batch_size=args.batch_size, shuffle=True,
                                   last_batch="discard")
    mx.random.seed(42 + rank)  # different init per worker: the kvstore makes them equal
    net = vgg(args.model, DATASETS[args.dataset][2], args.width, args.batch_norm)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.lr, "momentum": 0.9}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    crash_rank = os.environ.get("CRASH_RANK")
    crash_after = int(os.environ.get("CRASH_AFTER_STEPS", 10))
    step_sleep = float(os.environ.get("STEP_SLEEP", 0))
    launch_t0 = float(os.environ.get("LAUNCH_T0", T_START))
    steps = 0
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for batch, label in loader:
            if crash_rank == str(rank) and steps == crash_after:
                raise RuntimeError(f"simulated crash on worker rank {rank} after {steps} steps, "
                                   f"{time.time() - launch_t0:.2f}s after launch")
            with autograd.record():
                loss = loss_fn(net(batch), label)
            loss.backward()
            trainer.step(batch.shape[0])
            total += loss.mean().asscalar()
            batches += 1
            steps += 1
            if steps == 1:
                print(f"{tag} first step at {time.time() - launch_t0:.2f}s after launch",
                      flush=True)
            if step_sleep:
                time.sleep(step_sleep)
        print(f"{tag} epoch {epoch} loss {total / max(1, batches):.4f}", flush=True)
    print(f"{tag} done after {steps} steps", flush=True)


if __name__ == "__main__":
    main()
