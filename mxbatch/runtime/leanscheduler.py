"""What the scheduler's role runs (``rendezvous.scheduler``).

A scheduler's script never gets past ``import mxnet``: for ``DMLC_ROLE=scheduler``,
MXNet's import ends in ``kvstore_server._init_kvstore_server_module``, which creates a
``dist`` kvstore (ps-lite starts and binds the scheduler's port), serves until every node
has finished (``MXKVStoreRunServer``), and exits. What runs before that is MXNet's Python
package: about a CPU-second here (its operators' Python functions, NumPy), against 0.07 s
to load its library, and a job's members wait for the scheduler to listen.

``LEAN`` (the default): when the role's script (a file: ``python3 train.py``) does
nothing at module level before its first ``import mxnet`` but import other modules,
define functions and classes and bind names (``T0 = time.time()``), skipping it loses
nothing: the role's hook (``pyhook``), in the role's own interpreter with the role's
environment, finds the MXNet package the script would import (without importing it),
loads the library that package's ``libinfo.find_lib_path`` names (as MXNet's
``base._load_lib`` does), and makes the same two calls: ``MXKVStoreCreate("dist")`` and
``MXKVStoreRunServer``; then it exits 0 (1 with MXNet's error when a call fails),
without MXNet's exit-time teardown. Whenever any of that does not hold (a script that
does more first, ``python -m``/``-c``, no MXNet on the path, no library, a ``python -S``
role without the hook) the script runs as before.

``SCRIPT``: the role's command runs as launch.py runs it: for a scheduler whose modules
imported before MXNet change what MXNet finds (``sys.path``, ps-lite's variables in
``os.environ``), or one that is not MXNet's.
"""

import enum


class SchedulerStart(str, enum.Enum):
    """What the scheduler's role runs (see the module docstring)."""

    #: ps-lite's scheduler from the MXNet library the script would load, without the script
    LEAN = "lean"
    #: the role's command, as launch.py runs it
    SCRIPT = "script"
