"""The file rendezvous at scale: N simulated members on a real directory.

    python bench/rendezvous_scale.py --members 1000 [--dir D] [--cachefs] [--json]
    python bench/rendezvous_scale.py --sweep 10,100,1000 [--cachefs] --write-docs

Each member is a thread that does what an agent of one task does with the rendezvous,
with the runtime's own code and timing (``FileRendezvous``, ``Backoff``,
``DigestFollower``, ``agent.Schedule``): it waits for the scheduler's record, then
writes its task record every heartbeat, reads the digest every heartbeat and the
abort record every ``abort_poll_s``, and stops when it sees the abort. One more
thread is the watcher (``JobWatch`` over every member's record, the digest). Members
are spread over several processes (threads of one process share a GIL); with
``--cachefs`` each process runs on its own client of the caching test file system
(ci/clusters/cachefs: NFS-like lookup and attribute caches) and so do the scheduler,
the watcher and the abort writer, each on a different client from most members.

It prints (and with --json writes as JSON) ``members``, ``discover_p50_s``,
``discover_p99_s`` (scheduler published -> member has its address),
``abort_p99_s`` (abort written -> member has stopped) and
``fs_ops_per_member_per_s`` (file operations counted by ``FileRendezvous`` over the
steady state, the watcher's included, divided by members and seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mxbatch.runtime.agent import Schedule  # noqa: E402
from mxbatch.runtime.planfile import RunPlan, TaskInfo  # noqa: E402
from mxbatch.runtime.rendezvous import Backoff, FileRendezvous  # noqa: E402
from mxbatch.runtime.roles import Role  # noqa: E402
from mxbatch.runtime.states import (  # noqa: E402
    AbortKind,
    AbortRecord,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)
from mxbatch.runtime.taskrunner import MEMBER_POLL_CAP_S  # noqa: E402
from mxbatch.runtime.watch import DigestFollower, JobWatch  # noqa: E402

STATE = Path(os.environ.get("MXBATCH_CLUSTER_STATE", "/tmp/mxbatch-clusters"))
#: seconds after the scheduler's record, before the abort: the steady state measured
STEADY_S = 30.0
WARMUP_S = 5.0


def make_plan(run_dir: str, members: int) -> RunPlan:
    """1 scheduler (the watcher's task) and ``members`` workers."""
    tasks = [TaskInfo(0, Role.SCHEDULER, 0, ["x"], {})]
    tasks += [TaskInfo(1 + i, Role.WORKER, i, ["x"], {}) for i in range(members)]
    return RunPlan(job_id="bench", run_dir=run_dir, workdir="/", python=sys.executable,
                   created_at=time.time(), startup_timeout_s=3600, tasks=tasks)


# ------------------------------------------------------------------ one process's part


def member(plan: RunPlan, rank: int, schedule: Schedule, results: Dict[int, dict]) -> None:
    """One task's agent, as far as the rendezvous sees it."""
    rdv = FileRendezvous(plan.run_dir)
    backoff = Backoff(cap=MEMBER_POLL_CAP_S)
    while rdv.read_scheduler() is None:
        time.sleep(backoff.next())
    found = time.time()
    record = TaskRecord(role=Role.WORKER, rank=rank, state=TaskState.RUNNING, started_at=found)
    follower = DigestFollower(plan)
    next_beat = next_abort = time.monotonic()
    ops_at = {}
    while True:
        now = time.monotonic()
        if now >= next_beat:
            record.heartbeat += 1
            rdv.write_task(record)
            follower.observe(rdv.read_digest(), now)
            next_beat = now + schedule.heartbeat_s
        if now >= next_abort:
            if rdv.read_abort() is not None:
                break
            next_abort = now + schedule.abort_poll_s
        ops_at[int(time.time())] = rdv.ops
        time.sleep(max(0.0, min(next_beat, next_abort) - time.monotonic()))
    results[rank] = {"found": found, "stopped": time.time(), "ops_at": ops_at}


def watcher(plan: RunPlan, schedule: Schedule, results: Dict[str, dict],
            stop: threading.Event) -> None:
    rdv = FileRendezvous(plan.run_dir)
    watch = JobWatch(plan, by="scheduler[0]")
    me = TaskRecord(role=Role.SCHEDULER, rank=0, state=TaskState.RUNNING)
    keys = [k for k in plan.task_keys() if k[0] is not Role.SCHEDULER]
    ops_at = {}
    while not stop.is_set():
        records = rdv.read_tasks(keys)
        records[me.key] = me
        me.heartbeat += 1
        watch.check(records, time.time(), time.monotonic())
        rdv.publish_digest(watch.digest(records, time.time()))
        ops_at[int(time.time())] = rdv.ops
        if rdv.read_abort() is not None:
            break
        stop.wait(schedule.watch_s)
    results["watcher"] = {"ops_at": ops_at}


def run_part(args: argparse.Namespace) -> None:
    """Members ``first..first+count-1`` (and the watcher, scheduler or abort writer if
    asked) in this process; results as JSON on stdout."""
    plan = RunPlan.from_json(Path(args.run_dir, "plan.json").read_text())
    schedule = Schedule.of(plan)
    results: Dict = {}
    threads = [threading.Thread(target=member, args=(plan, r, schedule, results))
               for r in range(args.first, args.first + args.count)]
    stop = threading.Event()
    if args.watcher:
        threads.append(threading.Thread(target=watcher, args=(plan, schedule, results, stop)))
    for thread in threads:
        thread.start()
    rdv = FileRendezvous(plan.run_dir)
    if args.publish_at:
        time.sleep(max(0.0, args.publish_at - time.time()))
        rdv.publish_scheduler(SchedulerRecord(job_id=plan.job_id, ip="127.0.0.1", port=9000,
                                              listening=True))
        results["published"] = time.time()
    if args.abort_at:
        time.sleep(max(0.0, args.abort_at - time.time()))
        rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason="bench"))
        results["aborted"] = time.time()
    for thread in threads:
        thread.join(timeout=args.abort_at - time.time() + 120 if args.abort_at else 600)
    stop.set()
    json.dump({str(k): v for k, v in results.items()}, sys.stdout)


# ------------------------------------------------------------------ the whole run


def run(members: int, directory: Optional[Path], cachefs: bool, processes: int,
        steady_s: float = STEADY_S) -> dict:
    """One measurement; ``cachefs``: on the caching test file system's clients."""
    exec_argv: List[List[str]] = [[] for _ in range(processes)]
    if cachefs:
        env = cachefs_env()
        directory = Path(env["MXBATCH_CACHEFS_MNT"])
        clients = int(env["MXBATCH_CACHEFS_CLIENTS"])
        exec_argv = [[env["MXBATCH_CACHEFS_EXEC"], str(1 + i % clients)]
                     for i in range(processes)]
    base = Path(tempfile.mkdtemp(prefix="rdv-", dir=directory))
    run_dir = base / uuid.uuid4().hex[:8]
    run_dir.mkdir()
    plan = make_plan(str(run_dir), members)
    (run_dir / "plan.json").write_text(plan.to_json())
    FileRendezvous(str(run_dir)).prepare(plan)
    start = time.time() + 2.0 + members / 500  # every member waiting before it is published
    publish_at = start
    abort_at = publish_at + WARMUP_S + steady_s
    share = -(-members // processes)
    procs = []
    for i in range(processes):
        first, count = i * share, max(0, min(share, members - i * share))
        argv = [sys.executable, __file__, "--part", "--run-dir", str(run_dir),
                "--first", str(first), "--count", str(count)]
        # the watcher, the scheduler and the abort writer: each on a different process
        # (a different client with --cachefs) than the first members
        if i == processes - 1:
            argv += ["--watcher"]
        if i == (1 % processes):
            argv += ["--publish-at", repr(publish_at)]
        if i == (2 % processes):
            argv += ["--abort-at", repr(abort_at)]
        procs.append(subprocess.Popen(exec_argv[i] + argv, stdout=subprocess.PIPE, cwd="/",
                                      text=True))
    merged: Dict[str, dict] = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=abort_at - time.time() + 300)
        merged.update(json.loads(out))
    published, aborted = merged.pop("published"), merged.pop("aborted")
    watch_ops = merged.pop("watcher")["ops_at"]
    discover = [m["found"] - published for m in merged.values()]
    abort = [m["stopped"] - aborted for m in merged.values()]
    lo, hi = int(published + WARMUP_S), int(aborted) - 1
    ops = sum(_delta(m["ops_at"], lo, hi) for m in merged.values()) + _delta(watch_ops, lo, hi)
    subprocess.run(["rm", "-rf", str(base)], check=False)
    return {"members": members, "filesystem": "cachefs" if cachefs else "local",
            "processes": processes,
            "discover_p50_s": round(statistics.median(discover), 3),
            "discover_p99_s": round(_p99(discover), 3),
            "abort_p99_s": round(_p99(abort), 3),
            "fs_ops_per_member_per_s": round(ops / members / (hi - lo), 3),
            "watcher_ops_per_s": round(_delta(watch_ops, lo, hi) / (hi - lo), 1)}


def _delta(ops_at: Dict[str, int], lo: int, hi: int) -> int:
    """Operations counted between second ``lo`` and second ``hi`` (nearest samples)."""
    samples = sorted((int(k), v) for k, v in ops_at.items())
    before = max((v for k, v in samples if k <= lo), default=0)
    after = max((v for k, v in samples if k <= hi), default=before)
    return after - before


def _p99(values: List[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


def cachefs_env() -> Dict[str, str]:
    path = STATE / "cachefs.env"
    if not path.is_file():
        sys.exit("the caching test file system is not up: bash ci/clusters/cachefs-up.sh")
    out = subprocess.run(["bash", "-c", f'. "{path}" && env -0'], capture_output=True,
                         check=True).stdout
    return dict(i.decode().split("=", 1) for i in out.split(b"\0") if b"=" in i)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--sweep", help="comma-separated member counts")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: a temp dir)")
    parser.add_argument("--cachefs", action="store_true",
                        help="on the caching test file system (ci/clusters/cachefs-up.sh)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--steady", type=float, default=STEADY_S,
                        help="seconds of steady state measured (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--write-docs", action="store_true",
                        help="write the table and charts into docs/benchmarks.md")
    parser.add_argument("--part", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--watcher", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--publish-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--abort-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        run_part(args)
        return
    counts = [int(n) for n in args.sweep.split(",")] if args.sweep else [args.members]
    systems = [False, True] if args.cachefs and args.sweep else [args.cachefs]
    results = [run(n, args.dir, fs, min(args.processes, n), args.steady)
               for fs in systems for n in counts]
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=1))
    else:
        from common import print_table

        keys = list(results[0])
        print_table([keys] + [[str(r[k]) for k in keys] for r in results])
    if args.write_docs:
        from report import rendezvous_section

        rendezvous_section(results)


if __name__ == "__main__":
    main()
