"""Backends: where the tasks of a job run. ``registry`` knows their names, ``base`` the
contract; each module implements one (``local``, ``sge``, ``slurm``, ``yarn/``)."""
