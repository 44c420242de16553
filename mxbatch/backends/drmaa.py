"""``python -m mxbatch.backends.drmaa``: the DRMAA helper's path before it moved to
``mxbatch.backends.batch.drmaa``; kept so that a command line written by an earlier
mxbatch still runs it."""

import sys

from .batch.drmaa import helper_main

if __name__ == "__main__":
    sys.exit(helper_main(sys.argv[1:]))
