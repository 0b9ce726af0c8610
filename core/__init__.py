"""The bottom layer: facts every other package shares, with no TensorFlow, TFX or Airflow.

Exit codes, the node result protocol, the on-disk layout of runs and reports, span names,
atomic writes, ML Metadata read helpers, node ids, the bad-input error and logging set-up.
Everything here imports only the standard library (and `ml_metadata` in `core.metadata_queries`), so
the Airflow control plane and the TFX runtime both use it. See docs/ARCHITECTURE.md.
"""
