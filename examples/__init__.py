"""Runnable example programs (not shipped): ``python examples/spark_create_rdd.py`` and the others."""
