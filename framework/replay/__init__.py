"""``fw replay`` and ``fw archive``: the pipeline's history through PySpark (``job.py``, the
only part of the framework that imports pyspark, runs under ``spark-submit``)."""
