"""Site config and profiles: precedence (flags > spec > profile > defaults > built-in),
each value's origin in `config show`, and file:line errors for a bad profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mxbatch.backends.registry import load_site_config, options_for
from mxbatch.cli.jsonout import SCHEMA
from mxbatch.errors import SpecError
from mxbatch.runtime.roles import Role
from mxbatch.spec import config as siteconfig
from mxbatch.spec import parse as specs

from .conftest import write_spec

CONFIG = """\
default_profile: campus
defaults:
  network: {ports: 9100-9200}
  env: {SITE: everyone}
profiles:
  campus:
    backend: sge
    rendezvous: {dir: $SHARED/$USER/mxbatch}
    roles: {worker: {count: 3}, server: {count: 2}}
    backends: {sge: {queue: gpu.q, project: ml}}
  laptop:
    backend: local
"""

SPEC = "name: demo\ncommand: python3 train.py\nroles: {server: {count: 1}}\n"


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    shared = tmp_path / "shared"
    monkeypatch.setenv("SHARED", str(shared))
    monkeypatch.setenv("USER", "alice")
    path = write_spec(tmp_path / "config.yaml", CONFIG)
    monkeypatch.setenv("MXBATCH_CONFIG", str(path))
    return path


def test_profile_supplies_queue_rendezvous_dir_and_counts(site, tmp_path):
    spec = siteconfig.load_job(write_spec(tmp_path / "job.yaml", SPEC))
    assert spec.backend == "sge"
    assert spec.rendezvous.dir == tmp_path / "shared" / "alice" / "mxbatch"
    assert spec.role(Role.WORKER).count == 3          # the profile's
    assert spec.role(Role.SERVER).count == 1          # the spec wins over the profile
    assert spec.network.port_low == 9100              # the defaults block
    assert spec.env == {"SITE": "everyone"}
    options = options_for(spec, "sge")
    assert (options.queue, options.project, options.pe) == ("gpu.q", "ml", "smp")


def test_another_profile_and_no_profile(site, tmp_path):
    job = write_spec(tmp_path / "job.yaml", SPEC)
    laptop = siteconfig.load_job(job, profile="laptop")
    assert laptop.backend == "local" and laptop.role(Role.WORKER).count == 1
    assert "sge" not in laptop.backend_options
    assert siteconfig.backend_name(laptop, "slurm") == "slurm"   # the flag wins


def test_config_show_names_every_origin_and_the_flag_overrides(cli, site, tmp_path):
    job = write_spec(tmp_path / "job.yaml", SPEC)
    result = cli.run("config", "show", str(job), "-n", "5", "--json",
                     env={"MXBATCH_CONFIG": str(site), "SHARED": str(tmp_path / "shared"),
                          "USER": "alice"})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == SCHEMA and document["profile"] == "campus"
    settings = {s["key"]: s for s in document["settings"]}
    assert settings["roles.worker.count"]["value"] == 5
    assert settings["roles.worker.count"]["origin"] == "command line (-n/--workers)"
    assert settings["roles.server.count"] == {
        "key": "roles.server.count", "value": 1, "origin": f"{job}:3", "file": str(job),
        "line": 3}
    queue = settings["backends.sge.queue"]
    assert queue["value"] == "gpu.q" and queue["origin"].startswith("profile campus (")
    assert (queue["file"], queue["line"]) == (str(site), 10)
    assert settings["rendezvous.dir"]["line"] == 8
    assert settings["network.ports"]["origin"] == f"defaults ({site}:3)"
    assert settings["rendezvous.grace"]["origin"] == "built-in default"
    assert settings["roles.worker.command"]["origin"] == f"{job}:2 via command"
    text = cli.run("config", "show", str(job), "--backend", "local",
                   env={"MXBATCH_CONFIG": str(site), "SHARED": "/s", "USER": "alice"})
    assert text.returncode == 0, text.stderr
    assert "backend: local" in text.stdout and "# command line (--backend)" in text.stdout
    assert f"# profile campus ({site}:10)" in text.stdout


def test_render_uses_the_profile(cli, site, tmp_path):
    job = write_spec(tmp_path / "job.yaml", SPEC)
    result = cli.run("render", str(job), "--json",
                     env={"MXBATCH_CONFIG": str(site), "SHARED": str(tmp_path / "s"),
                          "USER": "alice"})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["backend"] == "sge"
    assert document["run_dir"].startswith(str(tmp_path / "s" / "alice" / "mxbatch"))
    script = document["native"]["scripts"]["worker"]
    assert "#$ -q gpu.q" in script and "#$ -P ml" in script and "#$ -t 1-3" in script


@pytest.mark.parametrize("profile,line,key,words", [
    ("backends: {sge: {queu: gpu.q}}", 4, "profiles.p.backends.sge.queu",
     "unknown key (did you mean 'queue'?)"),
    ("roles: {worker: {count: 0}}", 4, "profiles.p.roles.worker.count", "must be at least 1"),
    ("rendezvous: {dir: relative/runs}", 4, "profiles.p.rendezvous.dir", "must be an absolute"),
    ("command: python3 x.py", 4, "profiles.p.command", "a profile cannot set this key"),
    ("backend: sgee", 4, "profiles.p.backend", "did you mean 'sge'?"),
    ("\n    network:\n      ports: 80", 6, "profiles.p.network.ports", "within 1024-65535"),
])
def test_bad_profile_is_a_file_line_key_error(tmp_path, monkeypatch, profile, line, key, words):
    path = write_spec(tmp_path / "config.yaml", f"# site\nprofiles:\n  p:\n    {profile}\n")
    monkeypatch.setenv("MXBATCH_CONFIG", str(path))
    with pytest.raises(SpecError) as error:
        load_site_config()
    assert (error.value.path, error.value.line, error.value.key) == (path, line, key)
    assert words in str(error.value)


def test_unset_variable_fails_only_the_profile_that_uses_it(tmp_path, monkeypatch):
    path = write_spec(tmp_path / "config.yaml", "profiles:\n  p: {}\n  q:\n"
                      "    rendezvous: {dir: /x/$NO_SUCH_VARIABLE_H13}\n")
    monkeypatch.setenv("MXBATCH_CONFIG", str(path))
    site = siteconfig.load_config()
    assert site.layers("p")[0].label == "profile p"
    with pytest.raises(SpecError) as error:
        site.layers("q")
    assert (error.value.line, error.value.key) == (4, "profiles.q.rendezvous.dir")
    assert "$NO_SUCH_VARIABLE_H13 is not set" in str(error.value)


def test_paths_expand_variables_and_keep_a_doubled_dollar(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARED_H13", str(tmp_path))
    spec = specs.parse("command: x\nrendezvous: {dir: '$SHARED_H13/a$$b/$${SHARED_H13}'}\n",
                       tmp_path / "job.yaml")
    assert spec.rendezvous.dir == tmp_path / "a$b" / "${SHARED_H13}"


def test_bad_profile_fails_submit_with_exit_2_and_creates_nothing(cli, tmp_path):
    config = write_spec(tmp_path / "config.yaml",
                        "profiles:\n  p:\n    resources: {cpus: many}\n")
    job = write_spec(tmp_path / "job.yaml", SPEC)
    result = cli.run("submit", str(job), env={"MXBATCH_CONFIG": str(config)})
    assert result.returncode == 2
    assert f"{config}:3: profiles.p.resources.cpus: expected a whole number" in result.stderr
    assert "Traceback" not in result.stderr
    assert cli.run_dirs() == [] and not (cli.home / "jobs").exists()


def test_unknown_profile_and_missing_config_file(cli, site, tmp_path, monkeypatch):
    job = write_spec(tmp_path / "job.yaml", SPEC)
    result = cli.run("render", str(job), "--profile", "campsu",
                     env={"MXBATCH_CONFIG": str(site), "SHARED": "/s"})
    assert result.returncode == 2
    assert "no profile 'campsu'" in result.stderr and "did you mean 'campus'?" in result.stderr
    missing = cli.run("render", str(job), env={"MXBATCH_CONFIG": str(tmp_path / "nope.yaml")})
    assert missing.returncode == 2 and "no such config file" in missing.stderr
    monkeypatch.setenv("MXBATCH_CONFIG", "")
    assert siteconfig.load_config().profiles == {}


def test_xdg_location(tmp_path, monkeypatch):
    monkeypatch.delenv("MXBATCH_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert siteconfig.config_path() == tmp_path / "xdg" / "mxbatch" / "config.yaml"
    write_spec(tmp_path / "xdg" / "mxbatch" / "config.yaml" if
               (tmp_path / "xdg" / "mxbatch").mkdir(parents=True) is None else None,
               "profiles: {x: {backend: slurm}}\n")
    assert siteconfig.load_config().profiles["x"].data == {"backend": "slurm"}


def test_launch_takes_counts_from_the_profile(tmp_path, monkeypatch):
    path = write_spec(tmp_path / "config.yaml", "profiles:\n  p: {roles: {worker: {count: 4}}}\n")
    monkeypatch.setenv("MXBATCH_CONFIG", str(path))
    spec = siteconfig.job_from_mapping({"command": ["python3", "t.py"], "roles": {}},
                                       base_dir=tmp_path, default_name="launch", profile="p")
    assert spec.role(Role.WORKER).count == 4 and spec.role(Role.SERVER).count == 4
    flags = siteconfig.job_from_mapping({"command": ["x"], "roles": {"worker": {"count": 2}}},
                                        base_dir=tmp_path, default_name="launch", profile="p")
    assert flags.role(Role.WORKER).count == 2


def test_spec_error_for_a_profile_value_names_the_config_file(tmp_path, monkeypatch):
    # The spec is fine alone; the profile's container is checked where it was written.
    path = write_spec(tmp_path / "config.yaml",
                      "profiles:\n  p:\n    container: {runtime: podman, image: x}\n")
    monkeypatch.setenv("MXBATCH_CONFIG", str(path))
    from mxbatch.jobs import submit as jobs

    spec = siteconfig.load_job(write_spec(tmp_path / "job.yaml", SPEC), profile="p")
    with pytest.raises(SpecError) as error:
        jobs.prepare(spec, "yarn", for_submit=False)  # YARN runs docker only
    assert (error.value.path, error.value.line, error.value.key) == (path, 3,
                                                                     "profiles.p.container")
