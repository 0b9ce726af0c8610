"""Monthly retraining of the taxi model: one Airflow task per TFX node, run in the TFX runtime."""

import os

from airflow_tfx.dag_factory import build_arrivals_dag, build_dag, build_rollout_dag

DOC_MD = """
### Taxi retraining (TFX 1.21 on Airflow 3)

Each run ingests **one monthly span**. By default a run starts when a span *arrives*:
`taxi_span_arrivals` announces it on the asset `taxi_spans` (partition key = span, see
the Assets view) and this DAG runs once per announced span; a month without data gets
no run. With `airflow.schedule: monthly` the calendar creates the runs (a run at
2017-01-01 ingests span 201612) and `wait_for_span` waits for the data, skipping the run
if it never arrives. A manual run's `span` param wins.

* **validate_data**: CsvExampleGen, StatisticsGen, the curated schema, ExampleValidator,
  and the **DataGate**, which fails the run on anomalies or drift beyond the schema's
  thresholds (no retry; its report is in the task log).
* **train**: the window of recent spans that passed the gate, Transform, Trainer.
* **evaluate**: the last blessed model, Evaluator (AUC/accuracy thresholds and no drop vs baseline).
* **push**: AtomicPusher, *skipped* when the model is not blessed.

Every node runs in the TFX runtime (`RETRAIN_TFX_PYTHON`), never in the Airflow worker;
`run_summary` prints what the run ingested, found, scored and pushed. A gate stop, a
refused candidate, a failed task and a missed run deadline are sent to the `alerts:`
recipients with the span, the reason and the governance report's link.
"""

TEMPLATE = os.path.join(os.path.dirname(__file__), "compiled", "taxi.json")
dag = build_dag(template_path=TEMPLATE, dag_id="taxi_retraining", doc_md=DOC_MD)
# Announces each arrived span (the data schedule); None on the monthly calendar.
arrivals = build_arrivals_dag(template_path=TEMPLATE, dag_id="taxi_span_arrivals")
# Decides the canary under test from delayed labels (rollout mode canary); None in direct mode.
rollout = build_rollout_dag(template_path=TEMPLATE, dag_id="taxi_rollout")
