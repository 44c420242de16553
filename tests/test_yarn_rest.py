"""The ResourceManager REST client against a stand-in web service on 127.0.0.1 (the real
one is exercised by the yarn-marked tests in test_yarn.py): where the address comes
from, parsing, errors, killing, and status/cancel of a job with no skein driver."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from mxbatch.backends.records import JobRecord
from mxbatch.backends.yarn import appspec as yarn_spec
from mxbatch.backends.yarn import rest
from mxbatch.backends.yarn.backend import YarnHandle
from mxbatch.backends.yarn.kv import diagnostics_for
from mxbatch.backends.yarn.states import AppState, FinalStatus
from mxbatch.errors import BackendUnavailable, SpecError
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import AbortKind, AbortRecord

from .yarngolden import golden

APP = "application_1700000000000_0007"


class FakeRm:
    """A ResourceManager web service that knows ``apps`` (id -> the ``app`` object) and
    logs every request as (method, path, query, body)."""

    def __init__(self) -> None:
        self.apps: Dict[str, Dict[str, Any]] = {}
        self.requests: List[Tuple[str, str, Dict[str, List[str]], Any]] = []
        self.headers: List[Dict[str, str]] = []
        self.status_override: Optional[Tuple[int, bytes]] = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self, method: str) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((method, url.path, urllib.parse.parse_qs(url.query), body))
                fake.headers.append(dict(self.headers))
                if fake.status_override is not None:
                    return self._answer(*fake.status_override)
                parts = url.path.split("/")  # '', ws, v1, cluster, apps, id[, state]
                app = fake.apps.get(parts[5]) if len(parts) > 5 else None
                if app is None:
                    message = {"RemoteException": {
                        "exception": "NotFoundException", "javaClassName": "x",
                        "message": f"java.lang.Exception: app with id: {parts[-1]} not found"}}
                    return self._answer(404, json.dumps(message).encode())
                if method == "PUT" and parts[6:] == ["state"]:
                    app.update(state="KILLED", finalStatus="KILLED", amRPCAddress="N/A")
                    return self._answer(202, json.dumps({"state": "RUNNING"}).encode())
                self._answer(200, json.dumps({"app": app}).encode())

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PUT(self) -> None:
                self._handle("PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, app_id: str = APP, **fields: Any) -> Dict[str, Any]:
        app = {"id": app_id, "user": "someone", "state": "RUNNING", "finalStatus": "UNDEFINED",
               "diagnostics": "", "trackingUrl": "http://rm/proxy/x", "amRPCAddress": "N/A"}
        app.update(fields)
        self.apps[app_id] = app
        return app


@pytest.fixture
def rm() -> Iterator[FakeRm]:
    fake = FakeRm()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client(url: str, timeout: float = 5.0) -> rest.RmRestClient:
    return rest.RmRestClient(rest.RmUrls((url,), "the test"), timeout, user="alice")


def site(directory: Path, name: str, props: Dict[str, str]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text("<configuration>" + "".join(
        f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
        + "</configuration>")


# ------------------------------------------------------------------ where the RM is


def test_web_address_from_the_hadoop_configuration(tmp_path):
    conf = tmp_path / "conf"
    env = {"HADOOP_CONF_DIR": str(conf)}
    site(conf, "yarn-site.xml", {"yarn.resourcemanager.hostname": "rm.example"})
    urls = rest.resolve("", env)
    assert urls is not None and urls.urls == ("http://rm.example:8088",)
    assert "default for yarn.resourcemanager.webapp.address" in urls.origin
    site(conf, "yarn-site.xml", {
        "yarn.resourcemanager.hostname": "rm.example",
        "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:18088"})
    urls = rest.resolve("", env)
    assert urls is not None and urls.urls == ("http://rm.example:18088",)
    assert urls.origin == f"yarn.resourcemanager.webapp.address in {conf}/yarn-site.xml"
    # YARN_CONF_DIR first, as Hadoop looks; the option above all
    other = tmp_path / "other"
    site(other, "yarn-site.xml", {"yarn.resourcemanager.webapp.address": "10.0.0.1:1"})
    assert rest.resolve("", dict(env, YARN_CONF_DIR=str(other))).urls == ("http://10.0.0.1:1",)
    option = rest.resolve("http://rm:9/", env)
    assert option.urls == ("http://rm:9",) and option.origin == "backends.yarn.rm_url"


def test_web_addresses_with_ha_and_https(tmp_path):
    conf = tmp_path / "conf"
    site(conf, "yarn-site.xml", {
        "yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1, rm2",
        "yarn.resourcemanager.hostname.rm1": "a", "yarn.resourcemanager.hostname.rm2": "b",
        "yarn.resourcemanager.webapp.address.rm2": "b:8888"})
    assert rest.resolve("", {"HADOOP_CONF_DIR": str(conf)}).urls == ("http://a:8088",
                                                                      "http://b:8888")
    site(conf, "yarn-site.xml", {"yarn.http.policy": "HTTPS_ONLY",
                                 "yarn.resourcemanager.hostname": "rm"})
    assert rest.resolve("", {"HADOOP_CONF_DIR": str(conf)}).urls == ("https://rm:8090",)


def test_kerberos_clusters_keep_the_skein_driver(tmp_path):
    conf = tmp_path / "conf"
    site(conf, "yarn-site.xml", {"yarn.resourcemanager.hostname": "rm"})
    site(conf, "core-site.xml", {"hadoop.security.authentication": "kerberos"})
    assert rest.resolve("", {"HADOOP_CONF_DIR": str(conf)}) is None


def test_rm_url_option_must_be_a_url(tmp_path):
    backend, plan = golden(tmp_path, "command: x\nbackends: {yarn: {rm_url: 'rm:8088'}}\n")
    with pytest.raises(SpecError, match="rm_url: a URL, http://host:port"):
        backend.check(plan)


# ------------------------------------------------------------------ the client


def test_application_report_is_parsed(rm):
    rm.add(amRPCAddress="node7:41234", diagnostics="all good")
    app = client(rm.url).app(APP)
    assert app == rest.RestApp(app_id=APP, state=AppState.RUNNING,
                               final_status=FinalStatus.UNDEFINED, diagnostics="all good",
                               tracking_url="http://rm/proxy/x", user="someone",
                               am_rpc_address="node7:41234")
    rm.add(state="ACCEPTED", amRPCAddress="N/A:-1")
    assert client(rm.url).app(APP).am_rpc_address == ""
    method, path, query, body = rm.requests[-1]
    assert (method, path, query, body) == ("GET", f"/ws/v1/cluster/apps/{APP}", {}, None)


def test_kill_puts_the_killed_state_as_the_user(rm):
    rm.add()
    client(rm.url).kill(APP)
    method, path, query, body = rm.requests[-1]
    assert (method, path, body) == ("PUT", f"/ws/v1/cluster/apps/{APP}/state",
                                    {"state": "KILLED"})
    assert query == {"user.name": ["alice"]}
    assert {k.lower(): v for k, v in rm.headers[-1].items()}["x-xsrf-header"] == "mxbatch"
    assert rm.apps[APP]["state"] == "KILLED"


def test_user_is_hadoop_user_name_else_the_login():
    assert rest.user_name({"HADOOP_USER_NAME": "hdfs"}) == "hdfs"
    assert rest.user_name({}) != ""


def test_unknown_application_and_refusals(rm):
    with pytest.raises(rest.AppNotFound, match="not found"):
        client(rm.url).app("application_1_0001")
    with pytest.raises(rest.AppNotFound):
        client(rm.url).kill("application_1_0001")
    rm.status_override = (401, b"Authentication required")
    with pytest.raises(rest.RestRefused, match="HTTP 401"):
        client(rm.url).app(APP)
    rm.status_override = (500, b"{}")
    with pytest.raises(BackendUnavailable, match="answered GET with HTTP 500"):
        client(rm.url).app(APP)
    rm.status_override = (200, b"<html>not the RM</html>")
    with pytest.raises(BackendUnavailable, match="not a ResourceManager web service"):
        client(rm.url).app(APP)


def test_unreachable_resourcemanager_says_what_to_set():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailable) as error:
        client(url, timeout=1.0).app(APP)
    message = error.value.format_message()
    assert error.value.exit_code == 3
    assert f"web service unreachable: waited 1s for {url}" in message
    assert "backends.yarn.rm_url" in message and "connect_timeout" in message


def test_ha_asks_the_next_resourcemanager(rm):
    rm.add()
    urls = rest.RmUrls((f"http://127.0.0.1:{free_port()}", rm.url), "the test")
    ha = rest.RmRestClient(urls, 5.0, user="alice")
    assert ha.app(APP).state is AppState.RUNNING
    assert ha.app(APP).state is AppState.RUNNING  # the answering one first from now on
    assert len(rm.requests) == 2


# ------------------------------------------------------------------ status and cancel


def submitted(tmp_path: Path, rm_url: str):
    """A YARN job record as submit leaves it (run directory, plan, handle), no cluster."""
    backend, plan = golden(tmp_path, "command: x\nrendezvous: {dir: %s}\n" % (tmp_path / "r"))
    layout = RunLayout(plan.run.run_dir)
    Path(layout.backend_dir(yarn_spec.STATE_DIR)).mkdir(parents=True)
    Path(layout.plan).write_text(plan.run.to_json())
    record = JobRecord(job_id=plan.job_id, backend="yarn", run_dir=layout.root,
                       handle=YarnHandle(app_id=APP, rm_urls=(rm_url,)).to_dict())
    backend._job(record).driver = lambda: pytest.fail("the skein driver was asked")
    return backend, record, layout


def test_status_of_an_ended_application_over_rest(home, tmp_path, rm):
    abort = AbortRecord(kind=AbortKind.FAILED, reason="worker[1] exited with code 1",
                        role=Role.WORKER, rank=1, exit_code=1)
    rm.add(state="FINISHED", finalStatus="FAILED", diagnostics=diagnostics_for(abort.to_dict()))
    backend, record, layout = submitted(tmp_path, rm.url)
    status = backend.status(record)
    assert status.state.value == "FAILED" and status.terminal
    assert status.reason == "worker[1] exited with code 1"
    saved = json.loads(Path(layout.backend_file(yarn_spec.STATE_DIR, "report.json")).read_text())
    assert saved["state"] == "FINISHED"
    asked = len(rm.requests)
    backend.status(record)
    assert len(rm.requests) == asked  # an ended application is never asked again


def test_status_of_an_application_the_rm_forgot(home, tmp_path, rm):
    backend, record, _ = submitted(tmp_path, rm.url)
    status = backend.status(record)
    assert status.terminal and status.state.value == "FAILED"
    assert f"{APP} is unknown to the ResourceManager" in status.reason
    backend.cancel(record)  # nothing to kill: no error
    assert [r[0] for r in rm.requests] == ["GET"]


def test_cancel_kills_through_rest(home, tmp_path, rm, monkeypatch):
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))
    # running, with its application master at an address nobody answers on
    rm.add(amRPCAddress=f"127.0.0.1:{free_port()}")
    backend, record, layout = submitted(tmp_path, rm.url)
    assert not backend.status(record).terminal
    backend.cancel(record)
    puts = [r for r in rm.requests if r[0] == "PUT"]
    assert len(puts) == 1 and puts[0][3] == {"state": "KILLED"}
    status = backend.status(record)
    assert status.terminal and status.state.value == "CANCELLED"
    assert json.loads(Path(layout.root, "abort.json").read_text())["kind"] == "CANCELLED"


def test_rest_refused_falls_back_to_the_driver(home, tmp_path, rm):
    rm.status_override = (401, b"")
    backend, record, _ = submitted(tmp_path, rm.url)

    class Driver:
        def application_report(self, app_id):
            from types import SimpleNamespace
            return SimpleNamespace(state="FINISHED", final_status="SUCCEEDED",
                                   diagnostics="", tracking_url="")

    backend._job(record).driver = Driver
    assert backend.status(record).terminal


# ------------------------------------------------------------------ importing skein


def test_skein_imports_without_setuptools():
    code = ("import sys; from mxbatch.backends.yarn import skeinimport\n"
            "skein = skeinimport.skein()\n"
            "assert skein.ApplicationClient and skein.Client\n"
            "assert 'distutils' not in sys.modules and 'setuptools' not in sys.modules\n"
            "from skein.utils import grpc_fork_support_disabled\n"
            "with grpc_fork_support_disabled(): pass\n"
            "assert skeinimport.skein() is skein\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_loose_version_stand_in_orders_like_distutils():
    from mxbatch.backends.yarn.skeinimport import LooseVersion

    assert LooseVersion("1.76.0") > "1.18.0" and not LooseVersion("1.76.0") < "1.18.0"
    assert LooseVersion("1.9.1") < "1.18.0" and LooseVersion("1.18.0") >= "1.18"
    assert LooseVersion("1.18.0") == LooseVersion("1.18.0")
