"""A directory for the Python workers' path under a local Spark master: ``fw_local_daemon``
(see its docstring). The job's driver (``framework.replay.job``) imports its
``prefer_installed``; nothing else of the framework imports it."""
