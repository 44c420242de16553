"""What the YARN test cluster itself says of a job (ci/clusters/yarn-up.sh): its
application in the ResourceManager's REST API and its containers in the
NodeManagers' (``MXBATCH_YARN_RM_URL`` from yarn.env)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from .conftest import Cli
from .polling import poll

#: YARN's application states once it ended (the ResourceManager's words)
ENDED = ("FINISHED", "FAILED", "KILLED")
#: NodeManager container states of a container whose processes are gone
CONTAINER_GONE = ("EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE", "CONTAINER_CLEANEDUP_AFTER_KILL",
                  "DONE", "LOCALIZATION_FAILED")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def cluster_idle(env: Dict[str, str], timeout: float = 120.0) -> Optional[dict]:
    """Wait until the ResourceManager holds no running or pending application (the test
    cluster's one NodeManager fits one job at a time: an earlier test's application
    still releasing its containers would starve the next job's); the metrics that were
    still busy after ``timeout``, None when idle."""
    def metrics() -> dict:
        try:
            return _get(f"{env['MXBATCH_YARN_RM_URL']}/ws/v1/cluster/metrics")["clusterMetrics"]
        except (OSError, ValueError, KeyError):
            return {}

    def idle(m: dict) -> bool:
        return bool(m) and not (m.get("appsRunning") or m.get("appsPending")
                                or m.get("allocatedVirtualCores"))
    last = poll(metrics, idle, timeout, interval=1.0)
    return None if idle(last) else last


def app_id(cli: Cli, job: str) -> str:
    """The job's YARN application (its first attempt's), from its job record."""
    return cli.handle(job)["app_id"]


def rm_app(cli: Cli, app: str) -> dict:
    """What the ResourceManager's REST API says of an application."""
    return _get(f"{cli.env['MXBATCH_YARN_RM_URL']}/ws/v1/cluster/apps/{app}")["app"]


def live_containers(cli: Cli, app: str) -> List[str]:
    """``<container id> <state>`` of every container of ``app`` that a NodeManager
    has not yet seen end."""
    prefix = "container_" + app.split("_", 1)[1] + "_"
    found = []
    for node in _get(f"{cli.env['MXBATCH_YARN_RM_URL']}/ws/v1/cluster/nodes")["nodes"]["node"]:
        listed = _get(f"http://{node['nodeHTTPAddress']}/ws/v1/node/containers")
        for container in (listed.get("containers") or {}).get("container", []):
            if container["id"].startswith(prefix) and container["state"] not in CONTAINER_GONE:
                found.append(f"{container['id']} {container['state']}")
    return found


def yarn_left(cli: Cli, job: str, timeout: float = 15.0) -> List[str]:
    """What of the job YARN still has after ``timeout`` seconds: its application if it
    has not ended (or still counts running containers), its containers that a
    NodeManager still runs. [] once everything is gone."""
    app = app_id(cli, job)

    def left() -> List[str]:
        report = rm_app(cli, app)
        found = []
        if report["state"] not in ENDED or report.get("runningContainers", 0) > 0:
            found.append(f"{app} {report['state']} ({report.get('runningContainers')} "
                         "running containers)")
        return found + live_containers(cli, app)

    return poll(left, lambda found: not found, timeout, 0.5)


def yarn_finished_at(cli: Cli, job: str) -> Optional[float]:
    """When the ResourceManager says the job's application ended (None: not yet)."""
    finished = rm_app(cli, app_id(cli, job)).get("finishedTime") or 0
    return finished / 1000 if finished > 0 else None


@contextlib.contextmanager
def skein_driver(env: Dict[str, str]) -> Iterator[Dict[str, str]]:
    """``env`` with a skein configuration of its own (the cluster's credentials copied
    in, when it has some) and a global driver started in it: every CLI call of the
    caller uses that driver, and no other test run's ``skein driver stop`` ends it."""
    config = Path(tempfile.mkdtemp(prefix="mxbatch-test-skein-"))
    shared = env.get("SKEIN_CONFIG")
    for name in ("skein.crt", "skein.pem"):
        if shared and (Path(shared) / name).is_file():
            shutil.copy(Path(shared) / name, config / name)
    env = dict(env, SKEIN_CONFIG=str(config))
    skein = Path(sys.executable).parent / "skein"
    command = [str(skein) if skein.exists() else "skein", "driver"]
    subprocess.run(command + ["start"], env=env, check=True, capture_output=True, timeout=180)
    try:
        yield env
    finally:
        subprocess.run(command + ["stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(config, ignore_errors=True)
