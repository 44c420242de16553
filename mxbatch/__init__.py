"""mxbatch: run Apache MXNet parameter-server training on the systems you already have.

Importing this package has no side effects and pulls in no heavy dependency
(mxnet, drmaa, skein are imported lazily by the code that needs them).
"""

__version__ = "0.1.0"
