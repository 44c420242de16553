"""Consistent flags and help (issue 21, items 5 and 8): durations for every time flag,
backend names checked and listed from the registry, ``config show`` generated from the
schema, help texts that fit and point at the site."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib  # type: ignore[import-not-found]

from mxbatch.backends import registry
from mxbatch.cli import reference
from mxbatch.cli.effective import effective_settings
from mxbatch.runtime.roles import Role
from mxbatch.spec import parse as specs

from .test_local import fake_spec

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "10 parsecs"])
def test_wait_timeout_rejects_what_is_no_duration(cli, value):
    result = cli.run("wait", "some-job", "--timeout", value)
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--timeout'" in result.stderr and "Traceback" not in result.stderr


def test_time_flags_take_durations(cli, tmp_path):
    spec = fake_spec(tmp_path)
    job = cli.submit(spec)
    result = cli.run("wait", job, "--timeout", "10m")
    assert result.returncode == 0, result.stderr
    result = cli.run("doctor", "--no-probe", "--probe-timeout", "2m30s", "--json")
    assert result.returncode in (0, 1) and "Invalid value" not in result.stderr
    assert cli.run("doctor", "--probe-timeout", "inf").returncode == 2


@pytest.mark.parametrize("argv", [["render", "-b", "lcoal", "x.yaml"],
                                  ["submit", "-b", "lcoal", "x.yaml"], ["doctor", "-b", "lcoal"],
                                  ["config", "show", "-b", "lcoal"],
                                  ["launch", "-b", "lcoal", "--", "x"], ["list", "-b", "lcoal"]])
def test_a_mistyped_backend_gets_a_did_you_mean(cli, tmp_path, argv):
    result = cli.run(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "unknown backend 'lcoal' (did you mean 'local'?)" in result.stderr


@pytest.mark.parametrize("command", [["submit"], ["render"], ["doctor"], ["config", "show"],
                                     ["launch"], ["list"], ["clean"]])
def test_backend_help_lists_every_registered_backend(cli, command):
    text = re.sub(r"\s+", " ", cli.run(*command, "--help").stdout)
    listed = ", ".join(registry.names())
    assert listed in text, text


def test_the_spec_reference_and_project_description_name_every_backend():
    rows = {key: meaning for key, _, _, meaning in reference.spec_rows()}
    assert ", ".join(registry.names()) in rows["backend"]
    description = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    assert description == reference.project_description()
    assert all(name in description for name in registry.builtin_names())


def test_config_show_lists_every_key_of_the_schema(tmp_path):
    spec = specs.from_mapping({"command": ["x"], "env": {"A": "1"}}, base_dir=tmp_path)
    shown = {s.key for s in effective_settings(spec, "local")}
    for key, kind, _, _ in reference.spec_rows():
        if key.startswith("backends.") and not key.startswith("backends.local."):
            continue  # only the chosen backend's block
        if kind.startswith("mapping") or key in ("container", "roles", "command",
                                                 "resources") \
                or key.startswith(("container.", "resources.")) or key.endswith(".env"):
            continue  # sections, per-role keys shown under roles.<role>, an empty env
        names = [key.replace(reference.ROLE, role.value) for role in Role]
        assert all(name in shown for name in names), (key, sorted(shown))
    assert "rendezvous.stall_timeout" in shown and "env.A" in shown


def test_top_level_help_shows_whole_summaries(cli):
    text = cli.run("--help", env={"COLUMNS": "80"}).stdout
    commands = text[text.index("Commands:"):]
    assert "..." not in commands, commands
    assert 'eval "$(mxbatch\n              completion bash)"' in commands, commands


def test_help_points_at_the_documentation_site_not_the_repository(cli):
    for command in (["status"], ["submit"], ["launch"], ["list"]):
        text = cli.run(*command, "--help").stdout
        assert "docs/reference/json.md" not in text
        assert "JSON output" in re.sub(r"\s+", " ", text), text


def test_render_help_shows_the_chosen_backends_options(cli):
    plain = cli.run("render", "--help").stdout
    assert "backends.local:" in plain and "backends.sge:" not in plain
    assert "--all" in plain
    sge = cli.run("render", "-b", "sge", "--help").stdout
    assert "backends.sge:" in sge and "backends.slurm:" not in sge
    every = cli.run("render", "--help", "--all").stdout
    assert all(f"backends.{name}:" in every for name in registry.builtin_names())
    assert len(plain.splitlines()) < 60 < len(every.splitlines())


def test_an_attached_job_id_is_printed_once_on_a_terminal(cli, tmp_path):
    """stdout and stderr on one terminal: the id is on the ``submitted`` line only (a
    captured stdout still gets it, for scripts: every other test reads it there)."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    spec = fake_spec(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "mxbatch", "submit", "--wait", "-q",
                             str(spec)], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env=cli.env)
    os.close(slave)
    output, deadline = b"", time.time() + 120
    try:
        while time.time() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal's other side closed
                    break
                if not chunk:
                    break
                output += chunk
        assert proc.wait(timeout=max(1, deadline - time.time())) == 0, output
    finally:
        os.close(master)
    lines = output.decode().replace("\r", "").splitlines()
    job = next(re.search(r"submitted (\S+) to", line).group(1) for line in lines
               if "submitted" in line)
    assert job not in [line.strip() for line in lines], lines
    assert f"job {job} SUCCEEDED" in output.decode()


def test_wait_on_an_ended_job_prints_its_real_duration(cli, tmp_path):
    spec = fake_spec(tmp_path, extra="env: {FAKE_SLEEP: '1.5'}\n")
    job = cli.submit(spec)
    assert cli.run("wait", job, "--timeout", "2m").returncode == 0
    again = cli.run("wait", job)
    seconds = float(re.search(rf"job {job} SUCCEEDED \(([\d.]+)s\)", again.stderr).group(1))
    assert seconds >= 1.5, again.stderr  # submission to its end, not this wait's 0.0s
