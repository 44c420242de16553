"""The in-job runtime: runs on compute nodes, standard library only (Python >= 3.8).

It is shipped to every task as one zipapp file (``runtime.pyz``) in the run
directory; the modules import each other relatively so the same code works as
``mxbatch.runtime`` (tests, the CLI) and as ``mxbatch_runtime`` inside the zipapp.
"""
