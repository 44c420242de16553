"""The ``mxbatch`` command's entry point (``mxbatch`` and ``python -m mxbatch``).

It installs the command's SIGINT latch (``interrupts.SigintLatch``), then imports the
command line, so that a Ctrl-C while Python is still importing mxbatch exits 130 like
any other interrupt, not with a traceback, and is never lost; from then on the
``mxbatch`` group (``cli.main``) turns every exception into an exit code.

Python's cyclic garbage collector is off while the command line is imported: importing
makes tens of thousands of objects (modules, classes, functions) and no garbage, yet
the collector ran 33 times over them before a job's first role started (5-6 ms of the
CLI's CPU on this project's 2-core machine). It is on again once they are imported,
with them frozen (``gc.freeze``: left out of every later collection, as they live as
long as the process), so that a long ``launch`` or ``wait`` collects its garbage as
usual without walking them again.
"""

from __future__ import annotations

import gc
import sys

#: ``ExitCode.INTERRUPTED``, without importing mxbatch.errors (and click) first
_INTERRUPTED = 130


def run() -> None:
    from ..runtime.osbytes import relay_streams
    from .output import open_standard_streams

    open_standard_streams()  # a closed one (``>&-``) is /dev/null: no file takes its fd
    relay_streams()  # arguments, paths, environment values and logs: any bytes
    gc.disable()  # imports make no garbage: no collection walks them (above)
    try:
        from ..jobs.interrupts import install_latch

        install_latch()  # a Ctrl-C while importing is never dropped (interrupts.SigintLatch)
        from .commands import main
    except KeyboardInterrupt:
        sys.stderr.write("\nmxbatch: interrupted\n")
        sys.exit(_INTERRUPTED)
    finally:
        gc.freeze()
        gc.enable()
    main(prog_name="mxbatch")
