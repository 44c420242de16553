"""``RunLayout``: the one owner of every path inside a job's run directory.

``<rendezvous.dir>/<job-id>/`` holds:

- ``plan.json``: the ``RunPlan`` every task reads;
- ``runtime.pyz``: this package as a zipapp (not for an attached local job, whose
  supervisor is the CLI itself);
- ``pyhook/sitecustomize.py``: the exception hook put on every role's PYTHONPATH;
- ``scheduler.json``: the ``SchedulerRecord``; ``abort.json``: the ``AbortRecord``
  (``abort.lock``: the same record, the first writer's); ``digest.json``: the
  ``DigestRecord`` of the job's watcher;
- ``tasks/<role>-<rank>.json``: one ``TaskRecord`` per task;
- ``logs/<role>-<rank>.log``: the role's stdout and stderr plus supervisor notes;
  ``logs/<role>-<rank>.times``: when each part of it arrived (``logfile``);
  ``logs/<role>-<rank>.out``: the supervisor's own output; ``logs/manager.log``;
  ``logs/<prefix>-<role>.<index>.out``: a batch system's output of one array task;
- ``jobs/<name>.sh``: batch job scripts; ``<backend>/``: a backend's own files;
- ``containers/<role>-<rank>.env``: the environment file of a role's container (mode
  0600; written when the role starts, removed once the container runs);
- ``attempts.json``: the ``AttemptsRecord`` (every attempt of the job, why each ended,
  the hosts excluded), written by whoever drives the job's attempts; ``cancel.json``:
  the job's own abort record, written by ``cancel`` (it also stops a job waiting
  between two attempts).

**Attempts.** A restart relaunches the whole job as its next attempt (``attempt(k)``).
Attempt 0 uses the paths above; attempt k >= 1 keeps its own ``scheduler.json``,
``abort.json``, ``abort.lock``, ``digest.json``, ``tasks/`` and ``logs/`` (and the
batch system's output files, and a backend's files of one attempt:
``attempt_backend_file``) in ``attempts/<k>/``, with the same names. Everything else
(the plan, the runtime, the hook, job scripts, a backend's other files) is the job's.

Nothing else spells these names: the CLI, the backends and the runtime all ask a
``RunLayout``. Paths are ``str`` (the runtime runs on Python 3.8 nodes).
"""

import os

PLAN = "plan.json"
RUNTIME = "runtime.pyz"
SCHEDULER = "scheduler.json"
ABORT = "abort.json"
ABORT_LOCK = "abort.lock"
DIGEST = "digest.json"
TASKS = "tasks"
LOGS = "logs"
PYHOOK = "pyhook"
JOBS = "jobs"
CONTAINERS = "containers"
ATTEMPTS = "attempts"
ATTEMPTS_RECORD = "attempts.json"
CANCEL = "cancel.json"


def task_name(role: str, rank: int) -> str:
    """The file-name form of a task, ``worker-1``."""
    return "%s-%d" % (role, rank)


def task_log_name(role: str, rank: int) -> str:
    """The name of a task's log file, ``worker-1.log`` (in ``logs/``, or in a YARN
    container's log directory)."""
    return task_name(role, rank) + ".log"


class RunLayout:
    """The paths of one run directory (``root``) as attempt ``attempt`` of the job sees
    them; computing them touches nothing."""

    def __init__(self, root: str, attempt: int = 0) -> None:
        self.root = str(root)
        self.attempt_index = int(attempt)

    def __repr__(self) -> str:
        return "RunLayout(%r, attempt=%d)" % (self.root, self.attempt_index)

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _attempt_path(self, *parts: str) -> str:
        return os.path.join(self.attempt_dir, *parts)

    # ------------------------------------------------------------------ attempts
    def attempt(self, index: int) -> "RunLayout":
        """The layout of attempt ``index`` of the same job."""
        return RunLayout(self.root, index)

    @property
    def attempt_dir(self) -> str:
        """Where this attempt's own records and logs live: the run directory itself for
        attempt 0, ``attempts/<k>/`` for a later one."""
        if self.attempt_index == 0:
            return self.root
        return self._path(ATTEMPTS, str(self.attempt_index))

    @property
    def attempt_subdirs(self) -> tuple:
        """The directories an attempt's supervisors write into (made before it runs)."""
        return (self.tasks_dir, self.logs_dir)

    @property
    def attempts_record(self) -> str:
        return self._path(ATTEMPTS_RECORD)

    @property
    def cancel(self) -> str:
        return self._path(CANCEL)

    @property
    def plan(self) -> str:
        return self._path(PLAN)

    @property
    def runtime(self) -> str:
        return self._path(RUNTIME)

    @property
    def pyhook_dir(self) -> str:
        return self._path(PYHOOK)

    @property
    def scheduler(self) -> str:
        return self._attempt_path(SCHEDULER)

    @property
    def abort(self) -> str:
        return self._attempt_path(ABORT)

    @property
    def abort_lock(self) -> str:
        return self._attempt_path(ABORT_LOCK)

    @property
    def digest(self) -> str:
        return self._attempt_path(DIGEST)

    @property
    def tasks_dir(self) -> str:
        return self._attempt_path(TASKS)

    def task_record(self, role: str, rank: int) -> str:
        return self._attempt_path(TASKS, task_name(role, rank) + ".json")

    @property
    def logs_dir(self) -> str:
        """This attempt's logs."""
        return self._attempt_path(LOGS)

    @property
    def job_logs_dir(self) -> str:
        """The job's own logs (the manager's, a controller's), whatever the attempt."""
        return self._path(LOGS)

    def task_log(self, role: str, rank: int) -> str:
        """The role's stdout and stderr, and the supervisor's notes."""
        return self._attempt_path(LOGS, task_log_name(role, rank))

    def task_log_times(self, role: str, rank: int) -> str:
        """When each part of the task's log arrived (``logfile.TaskLog``)."""
        return self._attempt_path(LOGS, task_name(role, rank) + ".times")

    def supervisor_log(self, role: str, rank: int) -> str:
        """What a supervisor itself prints (a crash of the supervisor shows here)."""
        return self._attempt_path(LOGS, task_name(role, rank) + ".out")

    @property
    def manager_log(self) -> str:
        return self._path(LOGS, "manager.log")

    def ssh_log(self, host: str) -> str:
        """ssh's and a host agent's own stderr (the ssh backend; ``host`` as the hostfile
        names it, made safe for a file name)."""
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in host)
        return self._attempt_path(LOGS, "ssh-%s.log" % safe)

    def ssh_control(self, index: int) -> str:
        """The ssh backend's ControlPath of the session to the job's ``index``-th host:
        the master connection that the rsync to that host shares (``run_dir/ssh/cm-N``)."""
        return self._path("ssh", "cm-%d" % index)

    @property
    def mpirun_log(self) -> str:
        """mpirun's own output (the MPI backend)."""
        return self._attempt_path(LOGS, "mpirun.log")

    def batch_output(self, prefix: str, role: str, index_placeholder: str) -> str:
        """A batch system's output file of one array task of ``role``, with the
        system's own placeholder for the array index (``$TASK_ID``, ``%a``...)."""
        return self._attempt_path(LOGS, "%s-%s.%s.out" % (prefix, role, index_placeholder))

    def batch_output_single(self, prefix: str, name: str) -> str:
        """A batch system's output file of a job that is no array (``slurm-het.out``)."""
        return self._attempt_path(LOGS, "%s-%s.out" % (prefix, name))

    @property
    def jobs_dir(self) -> str:
        return self._path(JOBS)

    def job_script(self, name: str) -> str:
        return self._path(JOBS, name + ".sh")

    @property
    def containers_dir(self) -> str:
        return self._path(CONTAINERS)

    def container_env_file(self, role: str, rank: int) -> str:
        """The environment file of a role's container (``runtime.container``)."""
        return self._path(CONTAINERS, task_name(role, rank) + ".env")

    def backend_dir(self, backend: str) -> str:
        """A directory of the backend's own files (``yarn/``)."""
        return self._path(backend)

    def backend_file(self, backend: str, name: str) -> str:
        return self._path(backend, name)

    def attempt_backend_file(self, backend: str, name: str) -> str:
        """A backend's own file that differs from one attempt to the next (YARN's
        ``report.json``, MPI's hostfile after a node failure): ``<backend>/<name>`` for
        attempt 0, ``attempts/<k>/<backend>/<name>`` for attempt k."""
        return self._attempt_path(backend, name)

    #: the directories ``create`` makes (mode 0700)
    SUBDIRS = (TASKS, LOGS, PYHOOK)
