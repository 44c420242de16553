"""The YARN backend, on skein: one application per job.

``appspec`` renders the skein specification (pure), ``client`` reaches the
ResourceManager and this process's skein driver, ``app`` is one submitted job
as the CLI sees it, ``kv`` the key-value store as a rendezvous, ``logs`` the
NodeManagers' logs, ``states`` YARN's and skein's state names, and ``backend``
the ``Backend`` that ties them together.
"""
