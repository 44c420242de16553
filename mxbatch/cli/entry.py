"""The ``mxbatch`` command's entry point (``mxbatch`` and ``python -m mxbatch``).

It installs the command's SIGINT latch (``interrupts.SigintLatch``), then imports the
command line, so that a Ctrl-C while Python is still importing mxbatch exits 130 like
any other interrupt, not with a traceback, and is never lost; from then on the
``mxbatch`` group (``cli.main``) turns every exception into an exit code.
"""

from __future__ import annotations

import sys

#: ``ExitCode.INTERRUPTED``, without importing mxbatch.errors (and click) first
_INTERRUPTED = 130


def run() -> None:
    from ..runtime.osbytes import relay_streams

    relay_streams()  # arguments, paths, environment values and logs: any bytes
    try:
        from ..jobs.interrupts import install_latch

        install_latch()  # a Ctrl-C while importing is never dropped (interrupts.SigintLatch)
        from .commands import main
    except KeyboardInterrupt:
        sys.stderr.write("\nmxbatch: interrupted\n")
        sys.exit(_INTERRUPTED)
    main(prog_name="mxbatch")
