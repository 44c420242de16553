"""The skein driver of this CLI process (at most one) and reaching the ResourceManager.

skein talks to YARN through a Java "driver" process that takes seconds to start.
``driver()`` starts it once per process, after checking that the ResourceManager
answers at all (the Java client would otherwise retry for many minutes), and says
on stderr that it is starting one. A global driver (``skein driver start``) is
used when one runs: then nothing starts.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import socket
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ...errors import BackendUnavailable
from ...spec.paths import mxbatch_home
from . import skeinimport

RM_DEFAULT_PORT = 8032
_LOCK = threading.Lock()
#: this process's skein.Client, under "client" once started
_DRIVER: Dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class RmAddress:
    """One ResourceManager RPC address and where it came from (for messages)."""

    host: str
    port: int
    origin: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def conf_dirs(environ: Mapping[str, str]) -> List[Path]:
    """Where Hadoop's client configuration may be, in the order Hadoop looks."""
    dirs = [environ.get("YARN_CONF_DIR"), environ.get("HADOOP_CONF_DIR")]
    if environ.get("HADOOP_HOME"):
        dirs.append(os.path.join(environ["HADOOP_HOME"], "etc", "hadoop"))
    dirs.append("/etc/hadoop/conf")
    return [Path(d) for d in dirs if d]


def read_site(path: Path) -> Dict[str, str]:
    """The properties of a Hadoop ``*-site.xml`` ({} if unreadable)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    props = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            props[name.strip()] = value.strip()
    return props


def resourcemanager_addresses(environ: Mapping[str, str]) -> List[RmAddress]:
    """The ResourceManager RPC address(es) from ``yarn-site.xml`` (all of them with HA)."""
    site, props = "Hadoop's defaults", {}
    for directory in conf_dirs(environ):
        if (directory / "yarn-site.xml").is_file():
            site = str(directory / "yarn-site.xml")
            props = read_site(directory / "yarn-site.xml")
            break

    def address(suffix: str) -> RmAddress:
        key = "yarn.resourcemanager.address" + suffix
        host = props.get("yarn.resourcemanager.hostname" + suffix,
                         props.get("yarn.resourcemanager.hostname", "0.0.0.0"))
        value = props.get(key, f"{host}:{RM_DEFAULT_PORT}").replace(
            "${yarn.resourcemanager.hostname" + suffix + "}", host).replace(
            "${yarn.resourcemanager.hostname}", host)
        name, _, port = value.rpartition(":")
        origin = f"{key} in {site}" if key in props else f"the default for {key} ({site})"
        return RmAddress(name or value, int(port) if port.isdigit() else RM_DEFAULT_PORT, origin)

    if props.get("yarn.resourcemanager.ha.enabled", "false").lower() == "true":
        ids = [i.strip() for i in props.get("yarn.resourcemanager.ha.rm-ids", "").split(",")]
        return [address("." + i) for i in ids if i] or [address("")]
    return [address("")]


def wait_for_resourcemanager(timeout: float, environ: Optional[Mapping[str, str]] = None
                             ) -> RmAddress:
    """The first ResourceManager address that accepts a TCP connection within
    ``timeout`` seconds; ``BackendUnavailable`` naming the addresses and the wait."""
    addresses = resourcemanager_addresses(os.environ if environ is None else environ)
    started = time.monotonic()
    errors: Dict[str, str] = {}
    while True:
        for rm in addresses:
            try:
                with socket.create_connection((rm.host, rm.port), timeout=2):
                    return rm
            except OSError as exc:
                errors[str(rm)] = exc.strerror or str(exc)
        waited = time.monotonic() - started
        if waited >= timeout:
            tried = "; ".join(f"{rm} ({rm.origin}): {errors[str(rm)]}" for rm in addresses)
            raise BackendUnavailable(
                f"YARN ResourceManager unreachable: waited {waited:.0f}s for {tried}\n"
                "is the ResourceManager running, and HADOOP_CONF_DIR/YARN_CONF_DIR pointing "
                "at its configuration? (backends.yarn.connect_timeout sets the wait)")
        time.sleep(min(1.0, max(0.0, timeout - waited)))


def java_executable(environ: Mapping[str, str]) -> Optional[str]:
    """The ``java`` skein's driver runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    if environ.get("JAVA_HOME"):
        path = os.path.join(environ["JAVA_HOME"], "bin", "java")
        return path if os.access(path, os.X_OK) else None
    return shutil.which("java", path=environ.get("PATH"))


def check_tools(environ: Optional[Mapping[str, str]] = None) -> None:
    """``BackendUnavailable`` with a hint if skein, Java or ``yarn`` is missing."""
    environ = os.environ if environ is None else environ
    try:
        skeinimport.skein()
    except ImportError:
        raise BackendUnavailable("the skein package is missing: pip install 'mxbatch[yarn]'"
                                 ) from None
    if java_executable(environ) is None:
        where = (f"JAVA_HOME={environ['JAVA_HOME']} has no bin/java" if environ.get("JAVA_HOME")
                 else "no java on PATH and JAVA_HOME is not set")
        raise BackendUnavailable(f"skein needs Java for its driver: {where} "
                                 "(install a JDK 8-21 or set JAVA_HOME)")
    if shutil.which("yarn", path=environ.get("PATH")) is None:
        raise BackendUnavailable("skein needs the `yarn` command on PATH (it runs `yarn "
                                 "classpath --glob` to find Hadoop's jars): add "
                                 "$HADOOP_HOME/bin to PATH")


def driver_log() -> Path:
    return mxbatch_home() / "skein-driver.log"


def driver(connect_timeout: float) -> Any:
    """This process's ``skein.Client`` (started on first use; see the module docstring)."""
    with _LOCK:
        if "client" not in _DRIVER:
            check_tools()
            wait_for_resourcemanager(connect_timeout)
            _DRIVER["client"] = _global_driver() or _start_driver()
            # closed before the interpreter tears gRPC down (else skein's __del__
            # prints a traceback at exit); a global driver keeps running
            atexit.register(_close_driver)
        return _DRIVER["client"]


def _close_driver() -> None:
    started = _DRIVER.pop("client", None)
    if started is not None:
        try:
            started.close()
        except Exception:  # the driver may be gone already; nothing to do at exit
            pass


def _global_driver() -> Optional[Any]:
    skein = skeinimport.skein()

    try:
        return skein.Client.from_global_driver()
    except (skein.exceptions.SkeinError, OSError):
        return None


def _start_driver() -> Any:
    skein = skeinimport.skein()

    log = driver_log()
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.write("mxbatch: starting a skein driver for YARN (a Java process; this takes "
                     "a few seconds; `skein driver start` keeps one running)\n")
    sys.stderr.flush()
    try:
        return skein.Client(log=str(log))
    except Exception as exc:  # skein errors, OSError, CalledProcessError of `yarn classpath`
        raise BackendUnavailable(f"cannot start the skein driver: {exc}\nsee its log: {log}"
                                 ) from None


def node_capacity(client: Any) -> Optional[Tuple[int, int, int]]:
    """(memory MiB, vcores, gpus) of the largest running NodeManager; None if none runs."""
    nodes = client.get_nodes(states=["RUNNING"])
    if not nodes:
        return None
    return (max(n.total_resources.memory for n in nodes),
            max(n.total_resources.vcores for n in nodes),
            max(n.total_resources.gpus for n in nodes))
