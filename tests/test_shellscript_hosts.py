"""`mxbatch render --format shell --backend ssh` (issue 38, friction 8): a script that
starts each role on its host of the hostfile over ssh, the scheduler's address filled
in, with the same teardown; run for real on the ssh test hosts (ci/clusters/hosts-up.sh)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .conftest import Cli, wait_for, write_spec
from .test_shellscript import processes_in

pytestmark = pytest.mark.ssh

#: says where it runs; a worker exits with $WEXIT; the others end soon, or hang on failure
ROLE = ("import os, sys, time\n"
        "r = os.environ['DMLC_ROLE']\n"
        "print('role', r, 'on', os.environ['DMLC_NODE_HOST'], 'root',\n"
        "      os.environ['DMLC_PS_ROOT_URI'], os.environ['DMLC_PS_ROOT_PORT'], flush=True)\n"
        "if r == 'worker':\n"
        "    time.sleep(1)\n"
        "    sys.exit(int(os.environ.get('WEXIT', '0')))\n"
        "time.sleep(0.5 if os.environ.get('WEXIT', '0') == '0' else 120)\n")


def _render(home, hosts_env, tmp_path: Path, worker_exit: int) -> str:
    import sys

    (tmp_path / "role.py").write_text(ROLE)
    spec = write_spec(tmp_path / "j.yaml",
                      f"command: {sys.executable} role.py\n"
                      f"env: {{WEXIT: '{worker_exit}'}}\n"
                      "roles: {worker: {count: 2}}\n"
                      "rendezvous: {grace: 2s}\n"
                      f"backends: {{ssh: {{hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}}}}}\n")
    rendered = Cli(home, hosts_env).run("render", "--format", "shell", "--backend", "ssh",
                                        str(spec))
    assert rendered.returncode == 0, rendered.stderr
    return rendered.stdout


def test_the_hosts_script_starts_each_role_on_its_host(home, hosts_env, tmp_path):
    script = _render(home, hosts_env, tmp_path, 0)
    hosts = hosts_env["MXBATCH_TEST_HOSTS"].split()
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            timeout=180, env=hosts_env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = re.findall(r"^role (\w+) on (\S+) root (\S+) (\d+)", result.stdout, re.M)
    assert sorted(role for role, *_ in lines) == ["scheduler", "server", "server", "worker",
                                                  "worker"]
    on = {role: host for role, host, *_ in lines}
    assert on["scheduler"] == hosts[0]
    assert {host for _, host, *_ in lines} == set(hosts)  # dealt round the hostfile
    assert {root for _, _, root, _ in lines} == {hosts[0]}
    assert "every worker succeeded" in result.stderr


def test_a_failing_worker_stops_the_roles_on_every_host(home, hosts_env, tmp_path):
    script = _render(home, hosts_env, tmp_path, 3)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            timeout=180, env=hosts_env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "exited with status 3: stopping the job" in result.stderr
    wait_for(lambda: processes_in(tmp_path) == [], 20, "the roles on the hosts to end")
