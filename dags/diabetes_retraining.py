"""Retraining of the diabetes model: one Airflow task per TFX node, run in the TFX runtime."""

import os

from airflow_tfx.dag_factory import build_arrivals_dag, build_dag, build_rollout_dag

DOC_MD = """
### Diabetes retraining (TFX 1.21 on Airflow 3)

Predicts progression (regression) from 10 columns of monthly spans.

Each run ingests **one monthly span** of `data/diabetes` and trains on the last
6 spans that passed the data gate: **validate_data** (ExampleGen, statistics,
the curated schema `schemas/diabetes/schema.pbtxt`, the DataGate), **train** (Transform,
Trainer), **evaluate** (the candidate vs the last blessed model), **push** (serving
check, then the AtomicPusher, skipped unless blessed). `run_summary` prints what the run
ingested, found, scored and pushed; `governance_report` links its report.
"""

TEMPLATE = os.path.join(os.path.dirname(__file__), "compiled", "diabetes.json")
dag = build_dag(template_path=TEMPLATE, dag_id="diabetes_retraining", doc_md=DOC_MD)
# Announces each arrived span (the data schedule); None on the monthly calendar.
arrivals = build_arrivals_dag(template_path=TEMPLATE, dag_id="diabetes_span_arrivals")
# Decides the canary under test from delayed labels (rollout mode canary); None in direct mode.
rollout = build_rollout_dag(template_path=TEMPLATE, dag_id="diabetes_rollout")
