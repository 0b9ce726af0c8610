"""TFMA's regression error metrics (MSE, MAE, MAPE) with their merge fixed.

TFMA 0.47's `_MeanRegressionErrorCombiner.merge_accumulators` takes the first accumulator
with `next(iter(accumulators))` and then loops over `accumulators` again: when Beam hands
it a list, the first accumulator is merged into itself and counted twice. On a diabetes
model whose eval MSE is 4,516 (numpy, every example once) TFMA reported 7,841. These are
the same metrics, names and keys (`mean_squared_error`, ...) with a merge that counts every
accumulator once; the factory names this module in their MetricConfigs, so Beam workers in
other processes import the fix with the metric.
"""

from __future__ import annotations

from tensorflow_model_analysis.metrics import mean_regression_error as upstream
from tensorflow_model_analysis.metrics import metric_types, metric_util


class _MergeOnce:
    def merge_accumulators(self, accumulators):
        # Into a new accumulator: TFMA's jackknife merges the same partition accumulators into
        # many leave-one-out samples, so merging into (mutating) the first one corrupts them.
        result = self.create_accumulator()
        for accumulator in accumulators:
            result.merge(accumulator)
        return result


class _SquaredCombiner(_MergeOnce, upstream._MeanSquaredErrorCombiner):
    pass


class _AbsoluteCombiner(_MergeOnce, upstream._MeanAbsoluteErrorCombiner):
    pass


class _PercentageCombiner(_MergeOnce, upstream._MeanAbsolutePercentageErrorCombiner):
    pass


def _computations(combiner_class):
    def computations(name=None, eval_config=None, model_name=None, output_name=None, example_weighted=False,
                     sub_key=None, aggregation_type=None, class_weights=None, preprocessors=None):
        key = metric_types.MetricKey(name=name, model_name=model_name, output_name=output_name, sub_key=sub_key,
                                     example_weighted=example_weighted)
        return [metric_types.MetricComputation(
            keys=[key], preprocessors=preprocessors,
            combiner=combiner_class(eval_config=eval_config, model_name=model_name, output_name=output_name,
                                    metric_key=key, class_weights=class_weights, aggregation_type=aggregation_type,
                                    example_weighted=example_weighted))]

    return metric_util.merge_per_key_computations(computations)


class MeanSquaredError(metric_types.Metric):
    """Mean of (label - prediction)^2."""

    def __init__(self, name: str = upstream.MEAN_SQUARED_ERROR_NAME, **kwargs):
        super().__init__(_computations(_SquaredCombiner), name=name, **kwargs)


class MeanAbsoluteError(metric_types.Metric):
    """Mean of |label - prediction|."""

    def __init__(self, name: str = upstream.MEAN_ABSOLUTE_ERROR_NAME, **kwargs):
        super().__init__(_computations(_AbsoluteCombiner), name=name, **kwargs)


class MeanAbsolutePercentageError(metric_types.Metric):
    """100 x mean of |label - prediction| / |label|."""

    def __init__(self, name: str = upstream.MEAN_ABSOLUTE_PERCENTAGE_ERROR_NAME, **kwargs):
        super().__init__(_computations(_PercentageCombiner), name=name, **kwargs)
