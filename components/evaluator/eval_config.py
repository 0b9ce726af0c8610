"""The Evaluator's TFMA config: the task's metrics, their thresholds and intervals.

The policy a candidate is judged by, beside the Evaluator that applies it: value
thresholds (floors, or ceilings for error metrics) and change thresholds vs the baseline,
on the overall slice only; every metric per slice as well; confidence intervals (jackknife
or Poisson bootstrap) so that a drop refuses only when significant (significance.py).
TensorFlow-free apart from TFMA's protos. The factory passes the config's values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import tensorflow_model_analysis as tfma
from google.protobuf import wrappers_pb2

# TFMA 0.52 no longer exports its config messages at the top level.
from tensorflow_model_analysis.proto import config_pb2

from components.evaluator import fairness as fairness_lib
from components.evaluator import new_span, regression_metrics
from core import tasks

# The config keys the thresholds come from (pipelines/config/schema.py documents each).
THRESHOLD_KEYS = ("min_auc", "min_accuracy", "max_auc_decrease", "max_accuracy_decrease", "max_mse", "max_mae",
                  "max_mape", "max_mse_increase", "max_mae_increase")


def _overall_only(threshold: config_pb2.MetricThreshold) -> config_pb2.PerSliceMetricThreshold:
    """Applies a threshold to the overall slice only: a slice of three trips has no
    meaningful AUC and must not veto a model; per-slice metrics are still computed."""
    return config_pb2.PerSliceMetricThreshold(slicing_specs=[config_pb2.SlicingSpec()], threshold=threshold)


# AUC's confusion matrices at 1,000 thresholds instead of TFMA's 10,000: with confidence
# intervals they are recomputed per jackknife sample and per slice, which made the
# Evaluator the slowest node of a taxi run (measured on 3 spans: 56.6 s -> 14.0 s). On a
# pushed taxi model's 404 examples: AUC 0.92297 at 1,000 thresholds, 0.92296 at 10,000,
# 0.92301 exact (scikit-learn).
_AUC_THRESHOLDS = 1000


def _thresholded(metric: str, lower_bound: float, max_decrease: float | None = None,
                 metric_config: dict | None = None) -> config_pb2.MetricConfig:
    """A metric with a floor and, optionally, the largest drop tolerated vs the baseline."""
    change = None
    if max_decrease is not None:
        change = config_pb2.GenericChangeThreshold(
            direction=tfma.MetricDirection.HIGHER_IS_BETTER, absolute={"value": -max_decrease}
        )
    threshold = config_pb2.MetricThreshold(
        value_threshold=config_pb2.GenericValueThreshold(lower_bound={"value": lower_bound}),
        change_threshold=change,
    )
    return config_pb2.MetricConfig(class_name=metric, per_slice_thresholds=[_overall_only(threshold)],
                             config=json.dumps(metric_config) if metric_config else "")


def _error_metric(metric: str, ceiling: float | None, max_relative_rise: float | None) -> config_pb2.MetricConfig:
    """An error metric (lower is better): an optional ceiling and, optionally, the largest
    rise vs the baseline relative to the baseline's value (0.1 = 10%)."""
    threshold = config_pb2.MetricThreshold()
    if ceiling is not None:
        threshold.value_threshold.CopyFrom(config_pb2.GenericValueThreshold(upper_bound={"value": ceiling}))
    if max_relative_rise is not None:
        threshold.change_threshold.CopyFrom(config_pb2.GenericChangeThreshold(
            direction=tfma.MetricDirection.LOWER_IS_BETTER, relative={"value": max_relative_rise}))
    # TFMA's own classes double-count an accumulator on merge (components/evaluator/regression_metrics.py).
    config = config_pb2.MetricConfig(class_name=metric, module=regression_metrics.__name__)
    if threshold.ListFields():
        config.per_slice_thresholds.append(_overall_only(threshold))
    return config


def _metrics(task: str, t: dict) -> list[config_pb2.MetricConfig]:
    """The metrics and thresholds of the config's task (thresholds on the overall slice);
    their names are core.tasks.KEY_METRICS."""
    if task == tasks.REGRESSION:
        return [
            _error_metric("MeanSquaredError", t["max_mse"], t["max_mse_increase"]),
            _error_metric("MeanAbsoluteError", t["max_mae"], t["max_mae_increase"]),
            # Relative to the label: comparable across datasets and scales (labels near zero inflate it).
            _error_metric("MeanAbsolutePercentageError", t["max_mape"], None),
        ]
    if task == tasks.MULTICLASS:
        return [_thresholded("SparseCategoricalAccuracy", t["min_accuracy"], t["max_accuracy_decrease"])]
    return [
        _thresholded("AUC", t["min_auc"], t["max_auc_decrease"], {"num_thresholds": _AUC_THRESHOLDS}),
        _thresholded("BinaryAccuracy", t["min_accuracy"]),
    ]


_CI_METHODS = {
    "jackknife": config_pb2.ConfidenceIntervalOptions.JACKKNIFE,
    "bootstrap": config_pb2.ConfidenceIntervalOptions.POISSON_BOOTSTRAP,
}


def fairness_groups(slice_features: Sequence[str], fairness: fairness_lib.FairnessSettings) -> list[str]:
    """The fairness features sliced for their groups only (those not in slice_features,
    whose every value the config asks metrics for)."""
    return [f for f in fairness.slices if f not in slice_features] if fairness.active else []


def eval_config(*, task: str, label_key: str, slice_features: Sequence[str], interval_method: str,
                slice_by_span: bool, thresholds: dict,
                fairness: fairness_lib.FairnessSettings | None = None) -> config_pb2.EvalConfig:
    """The task's metrics, overall and per slice, with value and change-vs-baseline
    thresholds, and confidence intervals (the Evaluator judges a drop by its significance).

    Args:
      thresholds: the values of THRESHOLD_KEYS.
      slice_by_span: a slice per span of the window (the new span alone, new_span.py).
      fairness: the groups' features (sliced too) and the rates their gaps need (fairness.py).
    """
    fairness = fairness or fairness_lib.FairnessSettings()
    groups = fairness_groups(slice_features, fairness)
    rates = [config_pb2.MetricConfig(class_name=name, config=json.dumps(config))
             for name, config in fairness_lib.metrics(task, fairness)]
    return config_pb2.EvalConfig(
        options=config_pb2.Options(
            compute_confidence_intervals=wrappers_pb2.BoolValue(value=True),
            confidence_intervals=config_pb2.ConfidenceIntervalOptions(method=_CI_METHODS[interval_method]),
        ),
        model_specs=[
            config_pb2.ModelSpec(
                signature_name="serving_default",
                label_key=label_key,
                preprocessing_function_names=["transform_features"],
            )
        ],
        slicing_specs=[config_pb2.SlicingSpec()]
        + [config_pb2.SlicingSpec(feature_keys=[f]) for f in (*slice_features, *groups)]
        # Each span of the window (the Evaluator tags the examples): the new span alone.
        + ([config_pb2.SlicingSpec(feature_keys=[new_span.SPAN_FEATURE])] if slice_by_span else []),
        metrics_specs=[
            config_pb2.MetricsSpec(metrics=[config_pb2.MetricConfig(class_name="ExampleCount"), *_metrics(task, thresholds),
                                     *rates])
        ],
    )
