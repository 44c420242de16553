"""Every spec error at once, sorted by line and capped, with hints for misplaced keys
(issue 21, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mxbatch.backends.registry import options_for
from mxbatch.errors import MAX_SPEC_ERRORS, SpecError, SpecErrors
from mxbatch.spec import parse as specs


def _errors(tmp_path: Path, text: str) -> SpecError:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        specs.load(path)
    return caught.value


def test_two_typos_are_reported_together_in_line_order(cli, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: two\ncommand: python3 t.py\nroles:\n"
                    "  worker: {cuont: 2}\n"          # line 4
                    "  server: {comand: x}\n"         # line 5
                    "rendezvous: {grace: soon}\n")    # line 6
    result = cli.run("submit", str(spec))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: 3 problems:"
    assert lines[1] == f"  {spec}:4: roles.worker.cuont: unknown key (did you mean 'count'?)"
    assert lines[2] == f"  {spec}:5: roles.server.comand: unknown key (did you mean 'command'?)"
    assert lines[3].startswith(f"  {spec}:6: rendezvous.grace: expected a duration")
    assert cli.run_dirs() == []
    assert not (cli.home / "jobs").exists() or list((cli.home / "jobs").iterdir()) == []


def test_misplaced_keys_point_where_they_belong(tmp_path):
    error = _errors(tmp_path, "command: x\nworkers: 2\ncpus: 3\nports: 9000-9100\n"
                              "roles: {worker: {memory: 2G}}\nqueue: gpu.q\n")
    messages = [e.message for e in error.errors]
    assert any("2: workers: unknown key (did you mean 'roles.worker.count'?)" in m
               for m in messages), messages
    assert any("3: cpus: unknown key (it is not a key here: did you mean 'resources.cpus'?)"
               in m for m in messages), messages
    assert any("did you mean 'network.ports'?" in m for m in messages)
    assert any("roles.worker.memory: unknown key (it is not a key here: did you mean "
               "'roles.worker.resources.memory'?)" in m for m in messages), messages
    assert any("6: queue: unknown key" in m for m in messages)  # (backends' keys: theirs)
    assert not any("workers" in m and "'workdir'" in m for m in messages)  # no typo of it


@pytest.mark.parametrize("text, key, hint", [
    ("worker: {count: 2}", "worker", "it is not a key here: did you mean 'roles.worker'?"),
    ("server: {count: 1}", "server", "it is not a key here: did you mean 'roles.server'?"),
    ("scheduler: {}", "scheduler",
     "it is not a key here: did you mean 'roles.scheduler'?"),
    ("scheduler: lean", "scheduler",
     "it is not a key here: did you mean 'rendezvous.scheduler'?"),
    ("workers: {count: 2}", "workers", "did you mean 'roles.worker'?"),
    ("count: 3", "count", "it is not a key here: did you mean 'roles.worker.count'?"),
    ("roles: {count: 3}", "roles.count",
     "it is not a key here: did you mean 'roles.worker.count'?"),
    ("resources: {count: 3}", "resources.count",
     "it is not a key here: did you mean 'roles.worker.count'?"),
    ("roles: {workers: {count: 2}}", "roles.workers", "did you mean 'worker'?"),
    ("roles: {server: {worker: {count: 2}}}", "roles.server.worker",
     "it is not a key here: did you mean 'roles.worker'?"),
])
def test_a_role_or_a_role_key_at_the_wrong_level_points_to_the_role(cli, tmp_path, text,
                                                                      key, hint):
    """Issue 38, 5: a top-level ``worker:`` was "did you mean 'workdir'?", ``server:`` a
    list of valid keys, ``count:`` ``roles.<role>.count``."""
    spec = tmp_path / "job.yaml"
    spec.write_text(f"command: python3 -c pass\n{text}\n")
    result = cli.run("submit", str(spec))
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"Error: {spec}:2: {key}: unknown key ({hint})\n"
    assert cli.run_dirs() == []


def test_a_role_at_the_wrong_level_of_a_profile_points_to_the_role(cli, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("defaults:\n  worker: {count: 2}\nprofiles:\n  p: {count: 3}\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("command: python3 -c pass\n")
    result = cli.run("render", str(spec), env={"MXBATCH_CONFIG": str(config)})
    assert result.returncode == 2
    assert result.stderr == (f"Error: {config}:2: defaults.worker: unknown key (it is not a "
                             "key here: did you mean 'roles.worker'?)\n")
    config.write_text("profiles:\n  p: {count: 3}\n")
    result = cli.run("render", "-p", "p", str(spec), env={"MXBATCH_CONFIG": str(config)})
    assert result.stderr == (f"Error: {config}:2: profiles.p.count: unknown key (it is not "
                             "a key here: did you mean 'roles.worker.count'?)\n")


def test_the_backend_blocks_report_each_of_their_problems(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: x\nbackends:\n  sge: {queu: a, submitter: qsb}\n"
                    "  slurm: {partition: 3, het: maybe}\n")
    with pytest.raises(SpecError) as caught:
        options_for(specs.load(path), "local")
    error = caught.value
    assert isinstance(error, SpecErrors) and len(error.errors) == 3
    assert [(e.line, e.key) for e in error.errors] == [
        (3, "backends.sge.queu"), (3, "backends.sge.submitter"), (4, "backends.slurm.het")]


def test_the_list_is_capped(tmp_path):
    keys = "".join(f"k{i}: 1\n" for i in range(30))
    error = _errors(tmp_path, "command: x\n" + keys)
    text = error.format_message()
    assert text.startswith("30 problems:") and text.endswith("and 10 more")
    assert len(text.splitlines()) == 1 + MAX_SPEC_ERRORS + 1


def test_one_problem_stays_one_plain_error(tmp_path):
    error = _errors(tmp_path, "command: x\nroles: {worker: {count: 0}}\n")
    assert not isinstance(error, SpecErrors)
    assert error.line == 2 and error.key == "roles.worker.count"
