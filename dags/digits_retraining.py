"""Monthly retraining of the digits image classifier: one Airflow task per TFX node."""

import os

from airflow_tfx.dag_factory import build_arrivals_dag, build_dag, build_rollout_dag

DOC_MD = """
### Digits retraining (image classification, TFX 1.21 on Airflow 3)

The same machinery as the taxi DAG on images: each run ingests **one monthly span** of
tf.Examples holding encoded PNGs (ImportExampleGen), validates and gates it (a shift in
the class mix stops the run), decodes and standardises the images in Transform, trains a
ResNet-family classifier through the trainer toolkit (strategy and mixed precision chosen
for the hardware, recorded on the Model in MLMD), evaluates accuracy overall and per class
against the last blessed model, and pushes only a blessed model.
"""

TEMPLATE = os.path.join(os.path.dirname(__file__), "compiled", "digits.json")
dag = build_dag(template_path=TEMPLATE, dag_id="digits_retraining", doc_md=DOC_MD)
# Announces each arrived span (the data schedule); None on the monthly calendar.
arrivals = build_arrivals_dag(template_path=TEMPLATE, dag_id="digits_span_arrivals")
# Decides the canary under test from delayed labels (rollout mode canary); None in direct mode.
rollout = build_rollout_dag(template_path=TEMPLATE, dag_id="digits_rollout")
