"""A backend from the ``mxbatch.backends`` entry point: found, its own options block
validated by its options class, a job run through it, and a later process using the
options the job was submitted with."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from mxbatch.errors import ExitCode

from .conftest import FAKEROLE, Cli, assert_no_processes, interrupt, task_record, wait_for

PLUGIN_SOURCE = Path(__file__).resolve().parent / "plugin"


@pytest.fixture
def plugin_cli(home, tmp_path) -> Cli:
    """The CLI with the plugin installed: its module on the path and a distribution's
    metadata declaring the entry point, as ``pip install`` would leave them."""
    site = tmp_path / "site"
    info = site / "mxbatch_echo_backend-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mxbatch-echo-backend\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[mxbatch.backends]\necho = mxbatch_echo_backend:EchoBackend\n"
        "broken = mxbatch_echo_backend:BrokenBackend\n"
        "followed = mxbatch_echo_backend:FollowedBackend\n")
    paths = [str(site), str(PLUGIN_SOURCE), os.environ.get("PYTHONPATH", "")]
    return Cli(home, dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p)))


def spec(tmp_path: Path, options: str) -> Path:
    role = json.dumps([sys.executable, str(FAKEROLE)])
    path = tmp_path / "job.yaml"
    path.write_text(f"command: {role}\nworkdir: {tmp_path}\n"
                    f"env: {{FAKE_OUT: '{tmp_path}'}}\n"
                    f"rendezvous: {{grace: 1s}}\nbackends:\n  echo: {options}\n")
    return path


def test_plugin_backend_runs_a_job_with_its_own_options(plugin_cli, tmp_path):
    path = spec(tmp_path, "{greeting: bonjour, slots: 3}")
    rendered = plugin_cli.run("render", "--backend", "echo", str(path))
    assert rendered.returncode == 0, rendered.stderr
    assert "ECHO_GREETING=bonjour" in rendered.stdout and "--slots 3" in rendered.stdout
    result = plugin_cli.run("submit", "--wait", "--backend", "echo", str(path))
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    seen = json.loads((tmp_path / "0.json").read_text())["env"]
    assert seen["ECHO_GREETING"] == "bonjour"
    # a fresh process rebuilds the backend with the options it was submitted with (the
    # stand-in role prints nothing of its own: --verbose shows the supervisor's lines)
    logs = plugin_cli.run("logs", job, "--role", "worker", "--rank", "0", "--verbose")
    assert logs.returncode == 0 and logs.stdout.startswith("[bonjour] "), logs.stdout
    assert plugin_cli.status(job)["backend"] == "echo"


def test_plugin_options_are_validated_like_the_spec(plugin_cli, tmp_path):
    path = spec(tmp_path, "{greting: bonjour}")
    result = plugin_cli.run("submit", "--backend", "echo", str(path))
    assert result.returncode == 2
    assert f"{path}:6: backends.echo.greting: unknown key (did you mean 'greeting'?)" \
        in result.stderr
    assert plugin_cli.run_dirs() == []
    help_text = plugin_cli.run("render", "-b", "echo", "--help").stdout
    assert "backends.echo:" in help_text and "ECHO_GREETING" in help_text


def test_without_the_plugin_its_block_is_an_unknown_backend(cli, tmp_path):
    path = spec(tmp_path, "{greeting: bonjour}")
    result = cli.run("render", str(path))
    assert result.returncode == 2 and "backends.echo: unknown backend" in result.stderr


def test_an_unexpected_exception_is_an_internal_error_with_a_log(plugin_cli, tmp_path):
    """A bug (here in a plugin) never ends in a traceback: one paragraph naming a log
    file that holds the traceback, exit 70, nothing created."""
    path = spec(tmp_path, "{slots: 3}").read_text().replace("echo:", "broken:")
    (tmp_path / "broken.yaml").write_text(path)
    for command in ("render", "submit"):
        result = plugin_cli.run(command, "--backend", "broken", str(tmp_path / "broken.yaml"))
        assert result.returncode == ExitCode.INTERNAL == 70, result.stderr
        assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
        assert "internal error of mxbatch" in result.stderr, result.stderr
        assert "the broken test plugin fails on purpose" in result.stderr
        log = Path(re.search(r"the traceback is in (\S+)\.", result.stderr).group(1))
        assert log.parent == plugin_cli.home / "internal-errors"
        text = log.read_text()
        assert "Traceback" in text and "RuntimeError" in text and "def render" not in text
        assert f"{command} --backend broken" in text
    assert plugin_cli.run_dirs() == [] and not (plugin_cli.home / "jobs").exists()


def _plant(folder: Path, how: str, tmp_path: Path) -> Path:
    """``folder`` made by someone else before mxbatch: owned by another user (uid
    65534, nobody), a symlink to a folder of the attacker's choosing, or open to all;
    returns the folder a log must never reach."""
    if how == "symlink":
        target = tmp_path / f"bait-{folder.name}"
        target.mkdir(mode=0o700)
        folder.symlink_to(target)
        return target
    folder.mkdir(mode=0o700)
    if how == "other-owner":
        os.chown(folder, 65534, 65534)
    else:
        folder.chmod(0o777)
    return folder


@pytest.mark.parametrize("how", [
    pytest.param("other-owner", marks=pytest.mark.skipif(
        os.geteuid() != 0, reason="only root can give a folder to another user")),
    "symlink", "open-to-all"])
def test_the_internal_error_log_goes_only_into_a_folder_of_this_user_alone(
        plugin_cli, tmp_path, how):
    """The log holds the whole command line: both of its folders prepared by someone
    else (``$MXBATCH_HOME/internal-errors`` and ``$TMPDIR/mxbatch-<uid>``) are refused,
    nothing is written into them, and the traceback is on stderr instead, saying why."""
    spec(tmp_path, "{}")
    broken = tmp_path / "broken.yaml"
    broken.write_text((tmp_path / "job.yaml").read_text().replace("echo:", "broken:"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    plugin_cli.home.mkdir(mode=0o700)
    baits = [_plant(plugin_cli.home / "internal-errors", how, tmp_path),
             _plant(temp / f"mxbatch-{os.getuid()}", how, tmp_path)]
    result = plugin_cli.run("render", "--backend", "broken", str(broken),
                            env={"TMPDIR": str(temp)})
    assert result.returncode == ExitCode.INTERNAL, result.stderr
    assert "internal error of mxbatch" in result.stderr
    assert "no log file was written" in result.stderr and "the traceback is in" not in \
        result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "the broken test plugin fails on purpose" in result.stderr
    why = {"other-owner": "is owned by uid 65534, not by this user",
           "symlink": "is a symlink", "open-to-all": "has mode 0777, not 0700"}[how]
    assert result.stderr.count(why) == 2, result.stderr
    for bait in baits:
        assert list(bait.iterdir()) == [], bait


@pytest.mark.parametrize("moment", ["at-once", "worker-running"])
def test_ctrl_c_on_a_followed_submit_cancels_the_job(plugin_cli, tmp_path, moment):
    """``submit --wait`` of a job the CLI follows (as on SGE or Slurm): Ctrl-C at once
    after the job id, or once the worker runs, cancels it: exit 130, nothing left."""
    role = json.dumps([sys.executable, str(FAKEROLE)])
    path = tmp_path / "job.yaml"
    path.write_text(f"command: {role}\nenv: {{FAKE_SLEEP: '600'}}\nrendezvous: {{grace: 1s}}\n")
    proc = plugin_cli.foreground("submit", "--wait", "--backend", "followed", str(path))
    job = proc.stdout.readline().strip()
    assert job, proc.communicate(timeout=60)[1]
    if moment == "worker-running":
        run_dir = plugin_cli.run_dir(job)
        wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("state") == "RUNNING",
                 60, "the worker to run")
    _, err = interrupt(proc, 60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert plugin_cli.status(job)["state"] == "CANCELLED"
    assert_no_processes(job)


def test_internal_errors_in_one_second_each_get_their_own_log(home, monkeypatch):
    """Two internal errors of one process within a second: two logs, both in the folder
    under MXBATCH_HOME (the second fell back to the temporary folder)."""
    from mxbatch.cli import internal

    monkeypatch.setattr(internal.time, "strftime", lambda _: "20260101-000000")
    first, second = (internal.internal_error(RuntimeError(f"bug {n}")) for n in (1, 2))
    logs = [Path(re.search(r"the traceback is in (\S+)\.", e.message).group(1))
            for e in (first, second)]
    assert logs[0] != logs[1] and {log.parent for log in logs} == {home / "internal-errors"}
    assert "bug 2" in logs[1].read_text()
