"""Monthly retraining of the taxi model: one Airflow task per TFX node, run in the TFX runtime."""

import os

from airflow_tfx.dag_factory import build_dag

DOC_MD = """
### Taxi retraining (TFX 1.16 on Airflow 3)

Each run ingests **one monthly span**: the month of the run's data interval (a run at
2017-01-01 ingests span 201612), or the `span` param of a manual run. Backfilling past
months replays them one span at a time.

* **validate_data**: CsvExampleGen, StatisticsGen, the curated schema, ExampleValidator,
  and the **DataGate**, which fails the run on anomalies or drift beyond the schema's
  thresholds (no retry; its report is in the task log).
* **train**: the window of recent spans that passed the gate, Transform, Trainer.
* **evaluate**: the last blessed model, Evaluator (AUC/accuracy thresholds and no drop vs baseline).
* **push**: AtomicPusher, *skipped* when the model is not blessed.

Every node runs in the TFX runtime (`RETRAIN_TFX_PYTHON`), never in the Airflow worker;
`run_summary` prints what the run ingested, found, scored and pushed.
"""

dag = build_dag(
    template_path=os.path.join(os.path.dirname(__file__), "compiled", "taxi.json"),
    dag_id="taxi_retraining",
    doc_md=DOC_MD,
)
