"""Names that cross a process boundary, each spelled here once.

The environment variables mxbatch sets for its own processes and for the roles
(``MXBATCH_*``), the ones ps-lite reads (``DMLC_*``), and the message types of the ssh
channel. Every other module, in the runtime and in the CLI, imports them from here;
run-directory file names are ``layout.RunLayout``'s, task states ``states.TaskState``.
Standard library only, like the whole runtime.
"""

import enum

# ------------------------------------------------------------------ mxbatch's variables

#: every process of a job carries it (the leftover scan and ``cancel`` find them by it)
JOB_ID = "MXBATCH_JOB_ID"
#: ``off``: supervisors contain their roles by process groups and the environment
#: scan only, not in cgroups of their own (``cgroups``)
CGROUPS = "MXBATCH_CGROUPS"
#: the task index, for launchers that start each task alone (no ``--task``)
TASK = "MXBATCH_TASK"
#: the role of the task ("scheduler", "server", "worker"), as the role sees it
ROLE = "MXBATCH_ROLE"
#: the task's rank within its role, as the role sees it
RANK = "MXBATCH_RANK"
#: the job's attempt (0, 1, ...; a restart relaunches the whole job as the next one):
#: set for every role, and for a task's supervisor by the batch system's submission
ATTEMPT = "MXBATCH_ATTEMPT"
#: why the job was relaunched as this attempt (an ``EndReason`` of the previous
#: attempt: ``preempted``, ``failure``...); empty on attempt 0
RESTART_REASON = "MXBATCH_RESTART_REASON"

#: a line a role prints to report metrics: ``MXBATCH_METRIC samples_per_sec=123.4``
METRIC_LINE = "MXBATCH_METRIC"

#: the role hook's claim: the pid of the one Python process of a role that reports for it
#: (the first one started; its children see the variable and stay silent)
HOOK_OWNER = "MXBATCH_HOOK_PID"

#: a server's or worker's start gate (``gate``): ``<fd>:<inode>`` of the pipe whose end
#: of file lets its Python go on to ps-lite (the scheduler listens)
GATE = "MXBATCH_GATE"

#: the scheduler's role runs ps-lite's scheduler without its script when this is
#: ``lean`` (``leanscheduler.SchedulerStart``; the hook, ``pyhook``, does it)
SCHEDULER_START = "MXBATCH_SCHEDULER"

#: on the command line of a host's agent whose srun step asked Slurm for the GPUs of its
#: tasks: the agent gives each role its own share of the step's ``CUDA_VISIBLE_DEVICES``
#: (``environ.device_shares``)
GPU_SHARES = "MXBATCH_GPU_SHARES"

#: the prefixes of mxbatch's and ps-lite's variables: never inherited from the submitter
OWN_PREFIXES = ("DMLC_", "MXBATCH_")

# ------------------------------------------------------------------ devices

#: the GPUs a process may use (CUDA's numbering): a batch system sets it for the tasks
#: and steps it gave GPUs; a host's agent may deal its own to its roles (``GPU_SHARES``)
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

# ---------------------------------------------------------------- ps-lite's variables

DMLC_ROLE = "DMLC_ROLE"
DMLC_NUM_SERVER = "DMLC_NUM_SERVER"
DMLC_NUM_WORKER = "DMLC_NUM_WORKER"
DMLC_PS_ROOT_URI = "DMLC_PS_ROOT_URI"
DMLC_PS_ROOT_PORT = "DMLC_PS_ROOT_PORT"
DMLC_NODE_HOST = "DMLC_NODE_HOST"
DMLC_INTERFACE = "DMLC_INTERFACE"
DMLC_PS_VAN_TYPE = "DMLC_PS_VAN_TYPE"
DMLC_PS_WATER_MARK = "DMLC_PS_WATER_MARK"

#: ps-lite's own generic variable: the port a server or worker binds (its supervisor
#: sets it so that ps-lite's rank order follows mxbatch's: ``net.member_port``)
PS_NODE_PORT = "PORT"

#: known only when the role starts (the scheduler's address), so set by its supervisor
RENDEZVOUS_VARIABLES = (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NODE_HOST)


def rendezvous_environment(ip: str, port: int, node_host: str) -> dict:
    """The variables a role needs to find the scheduler and advertise itself."""
    return {DMLC_PS_ROOT_URI: ip, DMLC_PS_ROOT_PORT: str(port), DMLC_NODE_HOST: node_host}


# ------------------------------------------------------------ the role hook's reports


class HookEvent(str, enum.Enum):
    """What a role's hook (``pyhook``) reports on the role's stderr, in a line
    ``mxbatch hook <role>[<rank>]: <event> <JSON>`` (``notes.hook_line``; read by
    ``rolehook.HookReader``)."""

    STARTED = "started"    # before the script runs: pid, Python and MXNet versions and paths
    FINISHED = "finished"  # the script's own code has finished (its threads too): pid
    #: MXNet is about to create a dist kvstore, where ps-lite starts (a scheduler binds
    #: its port next; a member connects once its gate opens): pid
    CONNECTING = "connecting"
    #: a worker's dist kvstore exists: ps-lite's start-up barrier over every node has
    #: passed, so it (and every server) has registered with the scheduler: pid, and
    #: the rank the scheduler gave it
    CONNECTED = "connected"
    #: a worker's pushes through its dist kvstore, once they pause (and with FINISHED):
    #: pid, ``pushes`` (calls of push and pushpull), ``batches`` (the most pushes of one
    #: key); STARTED carries ``stack_signal`` (the signal on which faulthandler dumps
    #: every thread's stack on the role's stderr; absent: never send it, it would end
    #: the role) and ``thread`` (the main thread's ident, as the dump names it)
    KVSTORE = "kvstore"


# ------------------------------------------------------------- the ssh channel's messages


class MessageType(str, enum.Enum):
    """The ``t`` (``TYPE_KEY``) of a JSON-line message between the controller on the
    submit host and a host's agent (``remote.py``, ``channelrdv.py``, ``sshcontrol.py``)."""

    SETUP = "setup"  # controller -> agent: the plan, environment, tasks of the host
    HELLO = "hello"  # agent -> controller: ready (Python version, host name, pid)
    ERROR = "error"  # agent -> controller: cannot run here (the reason)
    START = "start"  # controller -> agent: this host is ready (hello, rsync): start the tasks
    QUIT = "quit"  # controller -> agent: another host failed, start nothing
    PUBLISHED = "published"  # controller -> agent: the scheduler's record changed: look now
    CALL = "call"  # agent -> controller: a rendezvous call
    RET = "ret"  # controller -> agent: a call's answer
    LOG = "log"  # agent -> controller: a task's output
    BYE = "bye"  # agent -> controller: the agent's exit status, its last message


#: the key of a message's type
TYPE_KEY = "t"
