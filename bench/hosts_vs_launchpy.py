"""mxbatch vs MXNet's own launch.py on the 4 namespace test hosts, --launcher ssh and mpi.

Needs ci/clusters/hosts-up.sh. Same training script (examples/image_classification.py,
launch.py's documented example: --dataset cifar10 --model vgg11 --epochs 1 --kvstore
dist_sync), same counts (2 servers, 2 workers), same hostfile (the hosts' addresses:
ps-lite needs literal IPs, and launch.py passes its hostfile entries as DMLC_NODE_HOST),
same Python (the venv's, by its path: the hosts' own python3 has no MXNet). For each
launcher it measures, in one run (--repeat for more):

  - first step: seconds from launch to the slower worker's first training step
    (LAUNCH_T0 travels in the command, ``env LAUNCH_T0=... python ...``: launch.py's ssh
    launcher passes no other environment)
  - wall: seconds from launch until the launcher exits
  - for mxbatch, where its start went, from the job's own records (``start_stages``)
  - secret on a command line: whether AWS_SECRET_ACCESS_KEY (set in the submitter's
    environment) showed in any process's command line during the run (launch.py's ssh
    launcher puts it in every ssh command)
  - crash: a worker raising after 3 steps; the launcher's exit code and how long it took
    (launch.py is stopped after --crash-timeout seconds if it hangs), then a sweep of
    whatever it left on the hosts

launch.py's scheduler runs on the submit host and advertises the address of its
default route, which the hosts cannot reach; its ``--host-ip`` is not even an option of
launch.py, and dmlc_tracker's mpi launcher ignores it. So the shim that runs launch.py
here also makes dmlc_tracker's ``get_host_ip`` return the bridge address (what
``--host-ip`` would do). launch.py gets a wrapper ``ssh`` first on its PATH that adds
``-F $MXBATCH_SSH_CONFIG`` (its ssh launcher takes no config option). mpirun runs as
root through OMPI_ALLOW_RUN_AS_ROOT*, for both. No traffic leaves the test hosts.

The roles name this Python by its path, so mxbatch runs the hosts' agents under it too
(``backends.hosts.agentpython``). "mxbatch ssh (agents: python3)" names ``python3``
instead (``backends.ssh.python`` and ``backends.mpi.python`` in a site config file), the
default before: on the test VM ``python3`` is a pyenv shim, a bash script that runs
``pyenv exec``, which launch.py never starts and which costs each host's agent its
start-up again.

``--baseline DIR`` adds "mxbatch ssh (baseline)" and "mxbatch mpi (baseline)": the
mxbatch of another checkout (DIR first on PYTHONPATH), interleaved with the others, so
that a change is compared with the code before it in one run, at one load. Both trees
need their bytecode (``__pycache__``): with PYTHONDONTWRITEBYTECODE set, a tree without
it compiles mxbatch at every start (70 ms here), so the script says so first
(``python -m compileall mxbatch`` in that tree fixes it).

    .venv/bin/python bench/hosts_vs_launchpy.py [--repeat 1] [--crash-timeout 60] \
        [--baseline DIR] [--only ssh|mpi]
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from common import (
    EXAMPLES,
    LAUNCH_PY_SHIM,
    cluster_env,
    compile_mxbatch,
    fmt,
    newest_run,
    print_table,
    start_stages,
)

SCRIPT = "image_classification.py"
ARGS = ["--dataset", "cifar10", "--model", "vgg11", "--epochs", "1", "--kvstore", "dist_sync"]
SECRET = "bench-" + secrets.token_hex(6)


def command(t0: float, token: str, crash: bool) -> List[str]:
    extra = ["CRASH_RANK=1", "CRASH_AFTER_STEPS=3", "STEP_SLEEP=0.2", "EPOCHS=30"] if crash else []
    args = ["--kvstore", "dist_sync"] if crash else ARGS
    return ["env", f"LAUNCH_T0={t0!r}", f"BENCH_RUN={token}", *extra, sys.executable, SCRIPT,
            *args]


#: launch.py with its scheduler's address set (see the module docstring)
SHIM = ("import os, dmlc_tracker.tracker as tracker\n"
        "tracker.get_host_ip = lambda host_ip=None: os.environ['BENCH_HOST_IP']\n"
        + LAUNCH_PY_SHIM)


#: the name suffix of the runs whose agents run under the hosts' python3
AGENTS_PYTHON3 = " (agents: python3)"


def launchers(hostfile: str, baseline: bool) -> Dict[str, object]:
    """name -> argv maker (t0, token, crash); with the baseline's mxbatch too."""
    def launch_py(kind: str):
        return lambda t0, token, crash: [
            sys.executable, "-c", SHIM, "-n", "2", "-s", "2", "-H", hostfile,
            "--launcher", kind, *command(t0, token, crash)]

    def mxbatch(kind: str):
        return lambda t0, token, crash: [
            sys.executable, "-m", "mxbatch", "launch", "-n", "2", "-s", "2", "-H", hostfile,
            "--launcher", kind, "--grace", "5s", *command(t0, token, crash)]

    found = {}
    for kind in ("ssh", "mpi"):
        found[f"launch.py {kind}"] = launch_py(kind)
        if baseline:
            found[f"mxbatch {kind} (baseline)"] = mxbatch(kind)
        found[f"mxbatch {kind}"] = mxbatch(kind)
        found[f"mxbatch {kind}{AGENTS_PYTHON3}"] = mxbatch(kind)
    return found


def secret_shown() -> bool:
    needle = SECRET.encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def sweep(token: str) -> int:
    """SIGKILL every process (any host: the pid namespace is shared) of this run."""
    needle = f"BENCH_RUN={token}".encode()
    killed = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0") or \
                        needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    os.kill(int(entry), signal.SIGKILL)
                    killed += 1
            except OSError:
                continue
    return killed


def run_once(name: str, make_argv, env: Dict[str, str], cwd: Path, timeout: float,
             crash: bool) -> dict:
    token = secrets.token_hex(4)
    t0 = time.time()
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(make_argv(t0, token, crash), cwd=cwd, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    shown, hung = False, False
    while True:  # the wall time to within Popen.wait's 50 ms polling, not a 0.2 s sleep
        shown = shown or secret_shown()
        try:
            proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if time.time() - t0 > timeout:
            hung = True
            break
    wall = time.time() - t0
    if hung:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    time.sleep(1)
    left = sweep(token)
    out.seek(0)
    text = out.read().decode(errors="replace")
    firsts = [float(x) for x in re.findall(r"first step at ([\d.]+)s after launch", text)]
    crashed = re.search(r"simulated crash on worker rank \d+ after \d+ steps, ([\d.]+)s", text)
    if not crash and proc.returncode != 0:
        sys.stderr.write(f"{name}: exit {proc.returncode}\n{text[-3000:]}\n")
    stages = start_stages(newest_run(Path(env["MXBATCH_HOME"]), t0), t0) \
        if name.startswith("mxbatch") else {}
    return {**stages, "rc": None if hung else proc.returncode, "wall": wall, "hung": hung,
            "first": max(firsts) if len(firsts) == 2 else None, "secret": shown,
            "left": left, "workers_ok": len(re.findall(r"done after \d+ steps", text)),
            "crashed_at": float(crashed.group(1)) if crashed else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--crash-timeout", type=float, default=60.0)
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the mxbatch of this checkout (see the docstring)")
    parser.add_argument("--only", choices=("ssh", "mpi"), help="one launcher kind only")
    args = parser.parse_args()
    compile_mxbatch()
    load_before = os.getloadavg()[0]
    hosts = cluster_env("hosts")
    work = Path(tempfile.mkdtemp(prefix="mxbatch-bench-hosts-"))
    shutil.copy(EXAMPLES / SCRIPT, work / SCRIPT)
    hostfile = work / "hosts"
    hostfile.write_text("\n".join(hosts["MXBATCH_TEST_HOSTS"].split()) + "\n")
    wrapper = work / "bin"
    wrapper.mkdir()
    (wrapper / "ssh").write_text('#!/bin/sh\nexec /usr/bin/ssh -F "$MXBATCH_SSH_CONFIG" "$@"\n')
    (wrapper / "ssh").chmod(0o755)
    env = dict(hosts, MXBATCH_HOME=str(work / "home"), OMP_NUM_THREADS="1",
               AWS_SECRET_ACCESS_KEY=SECRET, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    trees = [Path(__file__).resolve().parent.parent] + (
        [Path(args.baseline).resolve()] if args.baseline else [])
    for tree in trees:
        if os.environ.get("PYTHONDONTWRITEBYTECODE") and not (
                tree / "mxbatch" / "runtime" / "__pycache__").is_dir():
            print(f"warning: {tree}/mxbatch has no bytecode and PYTHONDONTWRITEBYTECODE is "
                  "set: every mxbatch start there compiles it (python -m compileall mxbatch)")
    makers = {name: make for name, make in launchers(str(hostfile), bool(args.baseline)).items()
              if args.only is None or f" {args.only}" in name}
    site_config = work / "agents-python3.yaml"
    site_config.write_text("defaults:\n  backends:\n    ssh: {python: python3}\n"
                           "    mpi: {python: python3}\n")
    env_of = {name: dict(env, PATH=f"{wrapper}:{env['PATH']}",
                         BENCH_HOST_IP=hosts["MXBATCH_TEST_BRIDGE_IP"])
              if name.startswith("launch.py") else
              dict(env, PYTHONPATH=str(Path(args.baseline).resolve()))
              if name.endswith("(baseline)") else
              dict(env, MXBATCH_CONFIG=str(site_config))
              if name.endswith(AGENTS_PYTHON3) else env for name in makers}
    results: Dict[str, List[dict]] = {name: [] for name in makers}
    for _ in range(args.repeat):
        for name, make in makers.items():  # interleaved: the same machine state for all
            results[name].append(run_once(name, make, env_of[name], work, 300, crash=False))
    crashes = {name: run_once(name, make, env_of[name], work, args.crash_timeout, crash=True)
               for name, make in makers.items()}

    def crash_text(r: dict) -> str:
        after = r["wall"] - r["crashed_at"] if r["crashed_at"] is not None else None
        since = f"{after:.1f}s after the crash" if after is not None else "(no crash seen)"
        what = (f"HUNG, killed {since}" if r["hung"] else f"exit {r['rc']} {since}")
        return what + (f"; {r['left']} processes left on the hosts" if r["left"] else
                       "; nothing left")

    print(f"\n4 hosts (network namespaces, one {os.cpu_count()}-core machine, load "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after), 2 servers + 2 "
          f"workers, dist_sync, {SCRIPT} "
          f"{' '.join(ARGS)}; {args.repeat} run(s) each (median, min-max)\n")
    rows: List[List[Optional[str]]] = [["", *makers]]
    rows.append(["exit codes", *(" ".join(str(r["rc"]) for r in results[n]) for n in makers)])
    rows.append(["workers finished", *(" ".join(str(r["workers_ok"]) for r in results[n])
                                       for n in makers)])
    rows.append(["launch -> first step (slower worker)",
                 *(fmt([r["first"] for r in results[n]]) for n in makers)])
    rows.append(["wall time", *(fmt([r["wall"] for r in results[n]]) for n in makers)])
    for key, label in (("plan", "  launch -> the job's plan"),
                       ("sched_exec", "  plan -> scheduler's role started"),
                       ("listen", "  plan -> scheduler listening"),
                       ("join_lag", "  listening -> last remote member goes on")):
        rows.append([label, *(fmt([r.get(key) for r in results[n]])
                              if n.startswith("mxbatch") else "" for n in makers)])
    rows.append(["secret on a command line", *("yes" if any(r["secret"] for r in results[n])
                                               else "no" for n in makers)])
    rows.append(["left on the hosts after a clean run",
                 *(str(sum(r["left"] for r in results[n])) for n in makers)])
    rows.append(["worker raises after 3 steps", *(crash_text(crashes[n]) for n in makers)])
    print_table(rows)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
