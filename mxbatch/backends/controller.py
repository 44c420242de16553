"""``python -m mxbatch.backends.controller``: the path the ssh and MPI controllers had
before they moved to ``mxbatch.backends.hosts.controller``; kept so that a command line
written by an earlier mxbatch still starts one."""

import sys

from .hosts.controller import main

if __name__ == "__main__":
    sys.exit(main())
