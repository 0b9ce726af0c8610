"""Airflow 3 glue: builds DAGs from compiled TFX pipelines and runs each node in the TFX runtime.

Nothing here imports TensorFlow or TFX: DAG files parse in milliseconds, and the Airflow
environment (Airflow 3, Python 3.11) never shares packages with the TFX runtime.
"""
