"""The learning tasks a pipeline can have, and the metrics each is judged and reported by.

One home for what differs by task outside the model code: the config's `task:` values,
the TFMA metric names the Evaluator computes (and their direction), and which of them the
summary, the governance report and `retrain models` show first. TF-free.
"""

from __future__ import annotations

BINARY = "binary_classification"
MULTICLASS = "multiclass_classification"
REGRESSION = "regression"
TASKS = (BINARY, MULTICLASS, REGRESSION)

# TFMA's metric names (the names its MetricKeys carry) of each task's thresholded metrics,
# the primary one first (charted per slice in the report).
KEY_METRICS = {
    BINARY: ("auc", "binary_accuracy"),
    MULTICLASS: ("sparse_categorical_accuracy",),
    REGRESSION: ("mean_squared_error", "mean_absolute_error", "mean_absolute_percentage_error"),
}
# Error metrics: a lower value is better (a change threshold bounds their rise).
LOWER_IS_BETTER = frozenset(KEY_METRICS[REGRESSION])
# Every key metric of every task, in a stable order (readers of records from any pipeline).
ALL_KEY_METRICS = tuple(dict.fromkeys(m for task in TASKS for m in KEY_METRICS[task]))


def primary_metric(metric_names) -> str | None:
    """The first key metric (in task order) among `metric_names`, or None."""
    present = set(metric_names)
    return next((m for m in ALL_KEY_METRICS if m in present), None)
