"""A learning-rate sweep through mxbatch's Python API: one job per learning rate (the
MLP of mlp-ps.yaml), all submitted at once, waited for together, then a table of
each job's final loss (the workers' last epoch, averaged).

    python3 examples/sweep.py [--lr 0.05 0.1 0.2] [--epochs 2] [--workers 2]
                              [--servers 1] [--backend slurm] [--timeout 1800]

Exits 0 when every job succeeded. The jobs' ids stay listed (``mxbatch list``), so
``mxbatch logs JOB`` and ``mxbatch status JOB`` still show each one.
"""

import argparse
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

import mxbatch

HERE = Path(__file__).resolve().parent
#: what train_mlp.py prints at the end of each epoch
EPOCH_LOSS = re.compile(r"\[worker rank=(\d+)\] epoch (\d+) loss ([\d.]+)")


def final_loss(job: "mxbatch.Job") -> Optional[float]:
    """The workers' loss in their last epoch, averaged; None when none was printed."""
    last: Dict[str, float] = {}
    for line in job.logs(role="worker"):
        match = EPOCH_LOSS.search(line)
        if match:
            last[match.group(1)] = float(match.group(3))
    return sum(last.values()) / len(last) if last else None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--backend", default=None, help="default: the spec's (local)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per job")
    args = parser.parse_args(argv)

    jobs = {}
    for lr in args.lr:
        jobs[lr] = mxbatch.submit(
            HERE / "mlp-ps.yaml", backend=args.backend, name=f"sweep-lr{lr:g}",
            overrides={"roles.worker.count": args.workers,
                       "roles.server.count": args.servers},
            args=["--lr", str(lr), "--epochs", str(args.epochs)])
        print(f"lr {lr:g}: submitted {jobs[lr].id}", file=sys.stderr)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:  # wait for all together
        ended = dict(zip(jobs, pool.map(lambda job: job.wait(timeout=args.timeout),
                                        jobs.values())))

    print(f"{'lr':>8}  {'job':<24}  {'state':<10}  final loss")
    for lr, status in ended.items():
        loss = final_loss(jobs[lr])
        shown = f"{loss:.4f}" if loss is not None else "-"
        print(f"{lr:>8g}  {status.job_id:<24}  {status.state.value:<10}  {shown}")
        if status.cause is not None and status.cause.lines:
            print(f"{'':>8}  {status.cause.task}: {status.cause.lines[-1]}")
    return 0 if all(status.succeeded for status in ended.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
