"""``mxbatch launch`` reads launch.py's command line: every option maps to the spec, the
command starts at its first word, unknown options are usage errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mxbatch.cli.launch import LaunchArgs, backend_of, job_data
from mxbatch.errors import SpecError
from mxbatch.runtime.roles import Role
from mxbatch.spec import parse as specs

from .conftest import FAKEROLE


def data(environ=None, **flags):
    return job_data(LaunchArgs(command=("python3", "train.py"), **flags), environ or {},
                    Path("/work"))


def counts(**flags):
    spec = specs.from_mapping(data(**flags), base_dir=Path.cwd())
    return spec.role(Role.WORKER).count, spec.role(Role.SERVER).count


def test_counts_default_like_launch_py():
    assert counts(workers=3) == (3, 3)  # as many servers as workers
    assert counts(workers=3, servers=1) == (3, 1)
    assert counts() == (1, 1)


@pytest.mark.parametrize("flags,flag", [({"workers": 0}, "-n/--num-workers"),
                                        ({"servers": 0}, "-s/--num-servers")])
def test_zero_counts_name_the_flag(flags, flag):
    with pytest.raises(SpecError, match=f"{flag}: must be at least 1, got 0"):
        data(**flags)


@pytest.mark.parametrize("args,flag", [(("-n", "0"), "-n/--num-workers"),
                                       (("-n", "-2"), "-n/--num-workers"),
                                       (("-s", "-1"), "-s/--num-servers"),
                                       (("--servers", "0"), "-s/--num-servers")])
def test_bad_counts_on_the_command_line_name_the_flag(cli, tmp_path, args, flag):
    result = cli.run("launch", *args, "--", "true", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"{flag}: must be at least 1, got {args[1]}" in result.stderr
    assert "roles." not in result.stderr and "Traceback" not in result.stderr
    assert cli.run_dirs() == []


def test_environment_flags():
    spec = data({"OMP_NUM_THREADS": "4"}, env=("OMP_NUM_THREADS", "A=1", "B:x:y"),
                env_server=("S:1",), env_worker=("W=2", "V:a=b"), p3=True)
    # NAME alone is inherited with the environment: its value is never written down
    assert spec["env"] == {"A": "1", "B": "x:y", "DMLC_PS_VAN_TYPE": "p3",
                           "DMLC_PS_WATER_MARK": "10"}
    assert spec["roles"]["server"]["env"] == {"S": "1"}
    assert spec["roles"]["worker"]["env"] == {"W": "2", "V": "a=b"}
    with pytest.raises(SpecError, match="--env: UNSET is not set in this environment"):
        data({}, env=("UNSET",))
    with pytest.raises(SpecError, match="--env-worker: expected NAME:VALUE"):
        data(env_worker=("novalue",))


def test_the_scheduler_is_lean_unless_the_command_line_says_script():
    """``--scheduler script`` (rendezvous.scheduler) runs the scheduler's command; by
    default only the scheduler's task carries MXBATCH_SCHEDULER=lean (pyhook)."""
    from mxbatch.spec import plan as planning

    def lean_tasks(**flags):
        spec = specs.from_mapping(data(**flags), base_dir=Path.cwd())
        return [t.role.value for t in planning.make(spec, "local").run.tasks
                if t.env.get("MXBATCH_SCHEDULER") == "lean"]

    assert lean_tasks() == ["scheduler"]
    assert data(scheduler="script")["rendezvous"] == {"scheduler": "script"}
    assert lean_tasks(scheduler="script") == []


def test_a_hostfile_means_ssh_unless_a_launcher_is_given():
    assert backend_of(LaunchArgs(command=("x",), hostfile="hosts")) == "ssh"
    assert backend_of(LaunchArgs(command=("x",), hostfile="hosts", launcher="mpi")) == "mpi"
    assert backend_of(LaunchArgs(command=("x",))) is None
    spec = data(hostfile="hosts", sync_dst_dir="/scratch/job")
    assert spec["backends"] == {"ssh": {"hostfile": "/work/hosts",
                                        "sync_dst_dir": "/scratch/job"}}
    assert data(hostfile="/etc/h", launcher="mpi")["backends"] == {"mpi": {"hostfile": "/etc/h"}}


@pytest.mark.parametrize("flags,message", [
    ({"launcher": "local", "backend": "ssh"}, "--launcher local and --backend ssh disagree"),
    ({"hostfile": "hosts", "launcher": "local"}, "a hostfile is for --launcher ssh or mpi"),
    ({"sync_dst_dir": "/d", "hostfile": "h", "launcher": "mpi"},
     "--sync-dst-dir: works with --launcher ssh only"),
])
def test_contradictions_are_usage_errors(flags, message):
    with pytest.raises(SpecError, match=message):
        data(**flags)


def test_unknown_option_before_the_command_is_a_usage_error(cli, tmp_path):
    result = cli.run("launch", "-n", "2", "--bogus", "python3", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "No such option" in result.stderr and "--bogus" in result.stderr
    assert cli.run_dirs() == []


def test_options_end_where_the_command_begins(cli, tmp_path):
    """launch.py's own line shape: options, the command, the command's options (even
    ones that look like launch's: -n 5 stays the command's)."""
    out = tmp_path / "out"
    out.mkdir()
    result = cli.run("launch", "-n", "2", "--launcher", "local", "--grace", "1s",
                     sys.executable, str(FAKEROLE), "-n", "5", "--launcher", "x",
                     cwd=tmp_path, env={"FAKE_OUT": str(out)})
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        seen = json.loads((out / f"{rank}.json").read_text())
        assert seen["argv"] == ["-n", "5", "--launcher", "x"]
        assert seen["env"]["DMLC_NUM_WORKER"] == "2"
