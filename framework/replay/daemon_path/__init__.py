"""A directory for the Python workers' path under a local Spark master: ``fw_local_daemon``
(see its docstring); nothing here is imported as part of the framework."""
