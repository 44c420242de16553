"""``python -m mxbatch`` = the ``mxbatch`` command."""

from .cli import main

main(prog_name="mxbatch")
