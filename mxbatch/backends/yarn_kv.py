"""The stable name containers use for the key-value store: ``--kv-store
mxbatch.backends.yarn_kv:container_store``.

Running YARN containers of a job name this dotted path in their launch script
(``yarn.appspec.KV_STORE_FACTORY``), and it must keep working for jobs submitted
by any earlier mxbatch while the nodes get a newer one: it is kept here, fixed,
whatever the layout of ``yarn/``. The implementation is ``yarn.kv``.
"""

from .yarn.kv import container_store

__all__ = ["container_store"]
