"""The ResourceManager's REST API: application state and kill without a skein driver.

skein's driver is a Java process that takes seconds to start; ``status`` and
``cancel`` of a submitted job need only what the ResourceManager's web service
answers over plain HTTP (standard library only):

- ``GET  /ws/v1/cluster/apps/{id}``: state, final status, diagnostics and the
  application master's RPC address (``RestApp``);
- ``PUT  /ws/v1/cluster/apps/{id}/state`` with ``{"state": "KILLED"}``: kill.

Where: ``backends.yarn.rm_url``, else ``yarn.resourcemanager.webapp.address``
(``webapp.https.address`` with ``yarn.http.policy=HTTPS_ONLY``, one per RM id
with HA) of the Hadoop configuration (``client.conf_dirs``). ``resolve`` runs
at submission and the URL is kept in the job's handle, so later commands ask
the same ResourceManager whatever their environment.

Authentication: "simple" clusters take the user from the ``user.name`` query
parameter (``HADOOP_USER_NAME``, else the login name), as Hadoop's own clients
do. Kerberos clusters (``hadoop.security.authentication=kerberos``) want SPNEGO,
which the standard library does not speak: ``resolve`` returns None and the
backend keeps using the skein driver there.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ...errors import BackendUnavailable
from .client import conf_dirs, read_site
from .states import AppState, FinalStatus

WEB_DEFAULT_PORT = 8088
WEB_HTTPS_DEFAULT_PORT = 8090
#: one HTTP request's limit; ``connect_timeout`` bounds the retries while unreachable
HTTP_TIMEOUT_S = 10.0
#: the default header of ``yarn.resourcemanager.webapp.rest-csrf.custom-header``
CSRF_HEADER = "X-XSRF-HEADER"
_VARIABLE = re.compile(r"\$\{([^}]+)\}")


class AppNotFound(Exception):
    """The ResourceManager does not know the application (restarted without recovery,
    or it forgot finished applications: ``yarn.resourcemanager.max-completed-applications``)."""


class RestRefused(Exception):
    """The ResourceManager refused the request (authentication, ACLs), in its words."""


@dataclasses.dataclass(frozen=True)
class RestApp:
    """What ``GET /ws/v1/cluster/apps/{id}`` says of an application."""

    app_id: str
    state: AppState
    final_status: FinalStatus
    diagnostics: str = ""
    tracking_url: str = ""
    user: str = ""
    #: host:port of the running application master's RPC server ("" if none)
    am_rpc_address: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RestApp":
        app = data["app"]
        address = str(app.get("amRPCAddress") or "")
        host, _, port = address.rpartition(":")
        if not host or host == "N/A" or not port.isdigit() or int(port) <= 0:
            address = ""
        return cls(app_id=str(app["id"]), state=AppState(app["state"]),
                   final_status=FinalStatus(app.get("finalStatus") or FinalStatus.UNDEFINED.value),
                   diagnostics=str(app.get("diagnostics") or ""),
                   tracking_url=str(app.get("trackingUrl") or ""),
                   user=str(app.get("user") or ""), am_rpc_address=address)


@dataclasses.dataclass(frozen=True)
class RmUrls:
    """The ResourceManager web service base URL(s), all of them with HA, and where they
    came from (for messages)."""

    urls: Tuple[str, ...]
    origin: str

    def __str__(self) -> str:
        return ", ".join(self.urls)


def _expand(value: str, props: Mapping[str, str]) -> str:
    """Hadoop's ``${name}`` substitution, from the same file's properties."""
    for _ in range(5):
        expanded = _VARIABLE.sub(lambda m: props.get(m.group(1), m.group(0)), value)
        if expanded == value:
            break
        value = expanded
    return value


def _site(environ: Mapping[str, str], name: str) -> Tuple[Optional[Path], Dict[str, str]]:
    for directory in conf_dirs(environ):
        if (directory / name).is_file():
            return directory / name, read_site(directory / name)
    return None, {}


def kerberos(environ: Mapping[str, str]) -> bool:
    """Whether the Hadoop configuration asks for Kerberos (SPNEGO on the web services)."""
    _, core = _site(environ, "core-site.xml")
    return core.get("hadoop.security.authentication", "simple").strip().lower() == "kerberos"


def config_urls(environ: Mapping[str, str]) -> RmUrls:
    """The web service URL(s) from ``yarn-site.xml`` (Hadoop's defaults without one)."""
    path, props = _site(environ, "yarn-site.xml")
    site = str(path) if path else "Hadoop's defaults"
    https = props.get("yarn.http.policy", "HTTP_ONLY").strip().upper() == "HTTPS_ONLY"
    key = ("yarn.resourcemanager.webapp.https.address" if https
           else "yarn.resourcemanager.webapp.address")
    port = WEB_HTTPS_DEFAULT_PORT if https else WEB_DEFAULT_PORT

    def url(suffix: str) -> str:
        host = props.get("yarn.resourcemanager.hostname" + suffix,
                         props.get("yarn.resourcemanager.hostname", "0.0.0.0"))
        value = _expand(props.get(key + suffix, props.get(key, f"{host}:{port}")),
                        dict(props, **{"yarn.resourcemanager.hostname": host}))
        return ("https://" if https else "http://") + value.strip()

    ids: List[str] = []
    if props.get("yarn.resourcemanager.ha.enabled", "false").strip().lower() == "true":
        ids = [i.strip() for i in props.get("yarn.resourcemanager.ha.rm-ids", "").split(",")
               if i.strip()]
    urls = tuple(url("." + i) for i in ids) or (url(""),)
    origin = f"{key} in {site}" if any(k.startswith(key) for k in props) else \
        f"the default for {key} ({site})"
    return RmUrls(urls, origin)


def resolve(option: str, environ: Optional[Mapping[str, str]] = None) -> Optional[RmUrls]:
    """Where to ask: ``option`` (``backends.yarn.rm_url``) if set, else the Hadoop
    configuration; None on a Kerberos cluster (the skein driver answers there)."""
    environ = os.environ if environ is None else environ
    if option.strip():
        return RmUrls((option.strip().rstrip("/"),), "backends.yarn.rm_url")
    if kerberos(environ):
        return None
    return config_urls(environ)


def user_name(environ: Optional[Mapping[str, str]] = None) -> str:
    """The user a "simple" cluster should take us for, as Hadoop's clients decide."""
    environ = os.environ if environ is None else environ
    return environ.get("HADOOP_USER_NAME") or getpass.getuser()


class RmRestClient:
    """A small client of the ResourceManager web service (see the module docstring).

    ``urls``: the base URLs (``http://host:port``), tried in order (HA: the standby
    redirects or refuses; the active one answers). ``connect_timeout``: how long an
    unreachable ResourceManager is retried before ``BackendUnavailable``."""

    def __init__(self, urls: RmUrls, connect_timeout: float = 20.0,
                 user: Optional[str] = None) -> None:
        self.urls = urls
        self.connect_timeout = connect_timeout
        self.user = user if user is not None else user_name()
        self._active = 0

    # ------------------------------------------------------------------ API
    def app(self, app_id: str) -> RestApp:
        """The application's report; ``AppNotFound`` if the ResourceManager has none."""
        return RestApp.from_json(self._request("GET", f"/ws/v1/cluster/apps/{app_id}"))

    def kill(self, app_id: str) -> None:
        """Ask the ResourceManager to kill the application (it answers 202 while the kill
        is under way, 200 once done); ``AppNotFound`` if it has none."""
        self._request("PUT", f"/ws/v1/cluster/apps/{app_id}/state",
                      {"state": AppState.KILLED.value})

    # ------------------------------------------------------------------ HTTP
    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None
                 ) -> Dict[str, Any]:
        started = time.monotonic()
        errors: Dict[str, str] = {}
        while True:
            order = self.urls.urls[self._active:] + self.urls.urls[:self._active]
            for url in order:
                try:
                    answer = self._once(method, url + path, body)
                except OSError as exc:  # refused, timed out, DNS: try the next, then again
                    reason = getattr(exc, "reason", exc)
                    errors[url] = getattr(reason, "strerror", None) or str(reason)
                    continue
                self._active = self.urls.urls.index(url)
                return answer
            waited = time.monotonic() - started
            if waited >= self.connect_timeout:
                tried = "; ".join(f"{u}: {errors.get(u, '?')}" for u in self.urls.urls)
                raise BackendUnavailable(
                    f"YARN ResourceManager web service unreachable: waited {waited:.0f}s for "
                    f"{tried} ({self.urls.origin})\nis the ResourceManager running? set "
                    "backends.yarn.rm_url (or yarn.resourcemanager.webapp.address in "
                    "HADOOP_CONF_DIR/YARN_CONF_DIR) to its web address; "
                    "backends.yarn.connect_timeout sets the wait")
            time.sleep(min(1.0, max(0.05, self.connect_timeout - waited)))

    def _once(self, method: str, url: str, body: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """One request; JSON answer ({} if empty). ``OSError`` when nobody answers."""
        if method != "GET":
            url += "?" + urllib.parse.urlencode({"user.name": self.user})
        data = json.dumps(body).encode() if body is not None else None
        timeout = min(HTTP_TIMEOUT_S, max(1.0, self.connect_timeout))
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if method != "GET":  # what Hadoop's REST CSRF filter asks for, when enabled
            headers[CSRF_HEADER] = "mxbatch"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (307, 503):  # an HA standby: ask the next one
                raise ConnectionError(f"standby (HTTP {exc.code})") from None
            words = _remote_message(exc)
            if exc.code == 404:
                raise AppNotFound(words) from None
            if exc.code in (401, 403):
                raise RestRefused(f"the ResourceManager at {url.split('?')[0]} refused "
                                  f"{method} (HTTP {exc.code}): {words}") from None
            raise BackendUnavailable(f"the ResourceManager at {url.split('?')[0]} answered "
                                     f"{method} with HTTP {exc.code}: {words}") from None
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            raise BackendUnavailable(f"{url.split('?')[0]} is not a ResourceManager web "
                                     "service (no JSON answer): check backends.yarn.rm_url "
                                     "or yarn.resourcemanager.webapp.address") from None


def _remote_message(error: urllib.error.HTTPError) -> str:
    """The ResourceManager's ``RemoteException`` message, else the HTTP reason."""
    try:
        data = json.loads(error.read() or b"{}")
        return str(data["RemoteException"]["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(error.reason)
