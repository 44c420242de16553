"""The lean start path of ``mxbatch launch`` and ``submit --wait`` (issue 22): the CLI
imports what the command needs before the first role starts, and nothing more; the
job's records say when it exec'd each role and what the CLI had spent by then."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import assert_no_processes

ROOT = Path(__file__).resolve().parent.parent

#: runs the ``mxbatch`` command line and, when it starts its first role, writes the
#: modules it had imported by then and its garbage collector's state, and exits (no
#: role runs)
FIRST_ROLE_PROBE = textwrap.dedent("""
    import gc, json, os, subprocess, sys
    start = subprocess.Popen.__init__
    def probe(self, args, *rest, **kwargs):
        if "FIRST-ROLE" in list(args):
            with open(os.environ["PROBE_OUT"], "w") as out:
                json.dump({"modules": sorted(sys.modules), "gc_enabled": gc.isenabled(),
                           "gc_frozen": gc.get_freeze_count()}, out)
            os._exit(0)
        return start(self, args, *rest, **kwargs)
    subprocess.Popen.__init__ = probe
    sys.argv = ["mxbatch"] + sys.argv[1:]
    from mxbatch.cli.entry import run
    run()
""")

#: what neither command needs before its first role (each costs milliseconds): the
#: plugin scan, the zipapp writer, statistics, shutil (with bz2 and lzma), other
#: commands' modules, job status
NOT_BEFORE_THE_FIRST_ROLE = ("importlib.metadata", "zipfile", "statistics", "secrets",
                             "tempfile", "shutil", "bz2", "lzma", "mxbatch.backends.status",
                             "mxbatch.jobs.cause", "mxbatch.cli.listing", "mxbatch.cli.logs",
                             "mxbatch.cli.site", "mxbatch.cli.internal", "mxbatch.doctor.runner")


def _at_first_role(cli, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "probe.json"
    result = subprocess.run([sys.executable, "-c", FIRST_ROLE_PROBE, *args], cwd=tmp_path,
                            env=dict(cli.env, PROBE_OUT=str(out)), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and out.is_file(), result.stderr
    return json.loads(out.read_text())


def _modules_at_first_role(cli, tmp_path: Path, *args: str) -> list:
    return _at_first_role(cli, tmp_path, *args)["modules"]


def test_launch_starts_its_first_role_before_importing_what_it_does_not_need(cli, tmp_path):
    modules = _modules_at_first_role(cli, tmp_path, "launch", "-q", "-n", "1", "-s", "1",
                                     "--", "python3", "-c", "pass", "FIRST-ROLE")
    assert "mxbatch.runtime.spawn" in modules  # the probe stood where roles start
    assert "yaml" not in modules  # no YAML file, no YAML parser
    assert [m for m in NOT_BEFORE_THE_FIRST_ROLE if m in modules] == []


def test_submit_wait_reads_its_yaml_and_nothing_else_it_does_not_need(cli, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: lean\ncommand: python3 -c pass FIRST-ROLE\n"
                    "roles: {server: {count: 1}, worker: {count: 1}}\n")
    modules = _modules_at_first_role(cli, tmp_path, "submit", "--wait", "-q", str(spec))
    assert "yaml" in modules and "mxbatch.runtime.spawn" in modules
    assert [m for m in NOT_BEFORE_THE_FIRST_ROLE if m in modules] == []


def test_the_collector_is_on_at_the_first_role_with_the_command_line_frozen(cli, tmp_path):
    """Off while the command line is imported (it makes no garbage), on again after."""
    state = _at_first_role(cli, tmp_path, "launch", "-q", "-n", "1", "-s", "1",
                           "--", "python3", "-c", "pass", "FIRST-ROLE")
    assert state["gc_enabled"]
    assert state["gc_frozen"] > 10000  # the command line's objects, left out of collections


def test_records_say_when_each_role_was_execd_and_attached_jobs_ship_no_zipapp(cli, tmp_path):
    result = cli.run("launch", "-n", "1", "-s", "1", "--", sys.executable, "-c", "pass",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    run_dir = cli.run_dir(job)
    for name in ("scheduler-0", "server-0", "worker-0"):
        record = json.loads((run_dir / "tasks" / f"{name}.json").read_text())
        assert record["started_at"] <= record["exec_at"] <= record["ended_at"]
        assert 0 < record["exec_cpu_s"] < 60  # the CLI's own CPU seconds by then
    assert not (run_dir / "runtime.pyz").exists()  # nothing but the CLI runs the runtime
    detached = cli.run("launch", "--detach", "-n", "1", "-s", "1", "--", sys.executable,
                       "-c", "pass", cwd=tmp_path)
    assert detached.returncode == 0, detached.stderr
    manager_job = detached.stdout.split()[0]
    assert (cli.run_dir(manager_job) / "runtime.pyz").is_file()  # its job manager runs it
    assert cli.run("wait", manager_job, "--timeout", "120").returncode == 0
    assert_no_processes(job)
    assert_no_processes(manager_job)


def test_a_mistyped_command_is_matched_against_every_command(cli):
    """The commands of other modules load when used; a typo still hears of them all."""
    result = cli.run("lst")
    assert result.returncode == 2
    assert "No such command 'lst'. Did you mean 'list'?" in result.stderr
