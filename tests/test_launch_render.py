"""From a launch.py line to a spec or a script, and submit's command-line overrides
(issue 21, items 3 and 6): ``launch --render``, ``submit SPEC -- ARGS``, ``--env``,
``--name``, and the note about launch flags after the command."""

from __future__ import annotations

import json
import sys

from .conftest import FAKEROLE, assert_no_processes
from .test_local import fake_spec


def _tasks(document: dict) -> list:
    """What each task runs, without what depends on the job id."""
    return [(t["role"], t["rank"], t["argv"],
             {k: v for k, v in t["env"].items() if k != "MXBATCH_JOB_ID"})
            for t in document["tasks"]]


def test_launch_render_yaml_is_a_spec_that_submits_the_same_job(cli, tmp_path):
    line = ["-n", "2", "-s", "1", "--env", "GREETING=hi", "--env-worker", "ONLY:workers",
            "--grace", "1s", "--", sys.executable, str(FAKEROLE), "--lr", "0.1"]
    spec_text = cli.run("launch", "--render", "yaml", *line, cwd=tmp_path)
    assert spec_text.returncode == 0, spec_text.stderr
    spec = tmp_path / "elsewhere" / "job.yaml"  # its workdir stays the launch directory
    spec.parent.mkdir()
    spec.write_text(spec_text.stdout)
    launched = json.loads(cli.run("launch", "--render", "json", *line, cwd=tmp_path).stdout)
    rendered = json.loads(cli.run("render", "--json", str(spec)).stdout)
    assert _tasks(rendered) == _tasks(launched)
    assert rendered["workdir"] == launched["workdir"] == str(tmp_path)
    assert rendered["backend"] == launched["backend"] == "local"
    script = cli.run("launch", "--render", "shell", *line, cwd=tmp_path).stdout
    assert script.startswith("#!") and "DMLC_ROLE=worker" in script
    assert cli.run_dirs() == []  # rendering creates nothing
    result = cli.run("submit", "--wait", "-q", str(spec))
    assert result.returncode == 0, result.stderr
    assert_no_processes(result.stdout.split()[0])


def test_submit_appends_arguments_and_takes_env_and_name(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = fake_spec(tmp_path, extra=f"env: {{FAKE_OUT: '{out}', KEPT: spec}}\n")
    result = cli.run("submit", "--wait", "-q", "--name", "renamed", "--env", "EXTRA=1",
                     "--env", "KEPT=flag", str(spec), "--", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[0]
    assert job.startswith("renamed-")
    seen = json.loads((out / "0.json").read_text())
    assert seen["argv"][-2:] == ["--epochs", "3"]
    assert seen["env"]["EXTRA"] == "1" and seen["env"]["KEPT"] == "flag"
    shown = cli.run("render", str(spec), "--", "--epochs", "3").stdout
    assert "--epochs 3" in shown
    unset = cli.run("submit", "--env", "NO_SUCH_VARIABLE_X", str(spec))
    assert unset.returncode == 2 and "NO_SUCH_VARIABLE_X is not set" in unset.stderr
    bad = cli.run("submit", "--name", "no spaces", str(spec))
    assert bad.returncode == 2 and "--name" in bad.stderr
    assert_no_processes(job)


def test_launch_notes_its_flags_after_the_command(cli, tmp_path):
    after = cli.run("launch", "--render", "text", "python3", "train.py", "-n", "2", "-s", "1",
                    cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    notes = [line for line in after.stderr.splitlines() if "note:" in line]
    assert notes == ["mxbatch: note: -n 2 -s 1 come after the command's first word, so they "
                     "go to the command (python3 train.py -n 2 -s 1), as with launch.py; to "
                     "give them to mxbatch, put them first: mxbatch launch -n 2 -s 1 python3 "
                     "train.py"]
    for line in (["-n", "2", "python3", "train.py"],
                 ["-n", "2", "--", "python3", "train.py", "-n", "5"]):
        quiet = cli.run("launch", "--render", "text", *line, cwd=tmp_path)
        assert quiet.returncode == 0 and "note:" not in quiet.stderr, quiet.stderr
