"""bench/scale.py at small N: every column of a row measured, on local and on every
test cluster that is up (the real runs, to N = 1,000, are docs/benchmarks.md's "Scale");
its pieces that need no job (dealing tasks to hosts, slopes, merging runs, the docs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
#: what every measured row has, on every backend
MEASURED = ("submit_to_running_s", "teardown_s", "status_s", "cpu_s", "peak_mib", "floor_s",
            "job_mib", "idle_cores")


@pytest.fixture(scope="module")
def scale():
    sys.path.insert(0, str(BENCH))
    try:
        import scale

        yield scale
    finally:
        sys.path.remove(str(BENCH))


def run_scale(tmp_path: Path, backend: str, sizes: str) -> dict:
    """bench/scale.py on one backend, its results (its scratch homes under tmp_path)."""
    out = tmp_path / f"{backend}.json"
    result = subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--backends", backend, "--sizes", sizes,
         "--json", str(out), "--idle-seconds", "1",
         "--settle-seconds", "0"], capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TMPDIR=str(tmp_path)), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())["results"][backend]


def check_rows(result: dict, sizes: list) -> None:
    assert [row["n"] for row in result["rows"]] == sizes, result["stopped"]
    for row in result["rows"]:
        missing = [key for key in MEASURED if row.get(key) is None]
        assert not missing, (missing, row)
        assert row["abort_reason"].endswith("was killed by SIGKILL"), row
        assert "left_behind" not in row, row


def test_local_small_sizes(tmp_path):
    result = run_scale(tmp_path, "local", "4,8")
    check_rows(result, [4, 8])
    assert result["stopped"] == ""
    assert set(result["slopes"]) >= {"submit_to_running_s", "floor_s"}


@pytest.mark.parametrize("backend", [
    pytest.param("ssh", marks=pytest.mark.ssh), pytest.param("mpi", marks=pytest.mark.mpi),
    pytest.param("sge", marks=pytest.mark.sge), pytest.param("yarn", marks=pytest.mark.yarn),
    pytest.param("slurm", marks=pytest.mark.slurm),
    pytest.param("slurm-alloc", marks=pytest.mark.slurm)])
def test_cluster_backend_small_size(tmp_path, backend):
    """One job of 4 tasks and its floor through the real cluster."""
    result = run_scale(tmp_path, backend, "4")
    check_rows(result, [4])
    assert result["capacity"] is None or result["capacity"] >= 4


def test_tasks_dealt_round_robin(scale):
    from scalefloor import deal

    assert deal(6, ["a", "b", "c", "d"]) == {"a": 2, "b": 2, "c": 1, "d": 1}
    assert deal(2, ["a", "b", "c"]) == {"a": 1, "b": 1, "c": 0}


def test_slopes_named(scale):
    rows = [{"n": 10, "status_s": 1.0, "floor_s": 1.0}, {"n": 1000, "status_s": 1.5,
                                                          "floor_s": 100.0}]
    found = scale.slopes(rows)
    assert found["status_s"]["name"] == "flat"
    assert (found["floor_s"]["name"], found["floor_s"]["slope"]) == ("linear", 1.0)


def test_runs_merged_into_one_section(scale):
    """Backends measured in separate runs: each keeps its own date and load, the later
    run of a backend replaces the earlier, the order is BACKENDS'."""
    def run(date, load, **results):
        machine = {"date": date, "cores": 2, "memory_gib": 20.0, "load_at_start": [load] * 3}
        return {"machine": machine, "results": results}

    row = {"n": 4, "load_at_start": [1.0, 1.0, 1.0], "submit_to_running_s": 1.0,
           "floor_s": 0.5}
    older = run("day 1", 1.0, sge={"rows": [row], "stopped": "old", "slopes": {}},
                ssh={"rows": [row], "stopped": "", "slopes": {}})
    newer = run("day 2", 2.0, sge={"rows": [row], "stopped": "", "slopes": {},
                                   "measured": {"date": "day 2, later",
                                                "load_at_start": [3.0, 3.0, 3.0]}})
    machine, results = scale.merged([older, newer])
    assert machine["date"] == "day 1"
    assert list(results) == ["ssh", "sge"]
    assert results["sge"]["stopped"] == ""
    text = scale.docs_section(machine, results, {})
    assert "### ssh" in text and "### sge" in text
    assert "Measured day 1; load average 1.0 1.0 1.0" in text
    assert "Measured day 2, later; load average 3.0 3.0 3.0" in text


def test_stop_line_keeps_the_cause(scale):
    """The CLI's words, joined, without the lines that only point into the scratch run
    directory."""
    stopped = ("stopped at N=830: RuntimeError: the job ended (exit 1) before every task "
               "ran:\nscale830-49cbc4a5\nmxbatch: submitted scale830-49cbc4a5 to mpi; run "
               "directory /tmp/x\nmxbatch: job scale830-49cbc4a5 FAILED: server[22] lost\n"
               "mxbatch: see the log: /tmp/x/logs/server-22.log\n")
    assert scale.stop_line(stopped) == (
        "Stopped at N=830: RuntimeError: the job ended (exit 1) before every task ran: / "
        "mxbatch: job scale830-49cbc4a5 FAILED: server[22] lost.")
