"""``python -m mxbatch`` = the ``mxbatch`` command."""

try:
    from .cli.entry import run
except KeyboardInterrupt:  # Ctrl-C while Python imports the entry point
    raise SystemExit(130) from None

run()
