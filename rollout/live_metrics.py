"""Live metrics of one served version, streamed from (prediction, label) pairs in bounded
memory, with the same definitions as the Evaluator's (TFMA) key metrics (`core/tasks.py`):

  auc                         ROC AUC over 10,000 equal score buckets (TFMA's AUC uses
                              10,000 thresholds); its variance is DeLong's (DeLong, DeLong
                              and Clarke-Pearson, Biometrics 1988), computed from the buckets
  binary_accuracy             score > 0.5 predicts 1 (TFMA's BinaryAccuracy threshold)
  sparse_categorical_accuracy the arg-max class equals the label
  mean_squared_error, mean_absolute_error, mean_absolute_percentage_error (100 |y - p| / |y|,
                              |y| floored at 1e-7 as Keras does)

A Tally holds histograms and running sums only: memory does not grow with the traffic.
"""

from __future__ import annotations

import math

import numpy as np

from core import tasks

BUCKETS = 10_000
_EPSILON = 1e-7
_MEANS = ("binary_accuracy", "sparse_categorical_accuracy", "mean_squared_error", "mean_absolute_error",
          "mean_absolute_percentage_error")


class _Moments:
    """Count, mean and M2 (Chan et al.'s parallel update): a mean and its variance."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64)
        if not values.size:
            return
        n_b, mean_b = values.size, float(values.mean())
        m2_b = float(((values - mean_b) ** 2).sum())
        n = self.n + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * self.n * n_b / n
        self.n = n

    def variance_of_mean(self) -> float:
        if self.n < 2:
            return math.inf
        return self.m2 / (self.n - 1) / self.n


def score_buckets(scores) -> np.ndarray:
    """The AUC histogram bucket of each score in [0, 1]."""
    return np.clip((np.asarray(scores, dtype=np.float64) * BUCKETS).astype(np.int64), 0, BUCKETS - 1)


class Tally:
    """One version's labelled predictions, summarised."""

    def __init__(self, task: str):
        if task not in tasks.TASKS:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(tasks.TASKS)}")
        self.task = task
        self.count = 0
        self._moments = {m: _Moments() for m in tasks.KEY_METRICS[task]}
        if task == tasks.BINARY:
            self._positive = np.zeros(BUCKETS, dtype=np.int64)
            self._negative = np.zeros(BUCKETS, dtype=np.int64)

    @classmethod
    def from_buckets(cls, positive: np.ndarray, negative: np.ndarray) -> "Tally":
        """A binary tally from its AUC histograms alone (positives and negatives per score
        bucket), as the decision simulation keeps them (rollout/decision_sim.py): its AUC is
        the one `add` would give; accuracy is not kept. The arrays are used, not copied."""
        tally = cls(tasks.BINARY)
        tally._positive = np.asarray(positive, dtype=np.int64)
        tally._negative = np.asarray(negative, dtype=np.int64)
        tally.count = int(tally._positive.sum() + tally._negative.sum())
        return tally

    @property
    def metrics(self) -> tuple[str, ...]:
        return tasks.KEY_METRICS[self.task]

    def add(self, predictions, labels) -> None:
        """predictions: binary -> the positive class's score; multiclass -> one row of scores
        per example (or the predicted class); regression -> the predicted value."""
        labels = np.asarray(labels, dtype=np.float64).reshape(-1)
        predictions = np.asarray(predictions, dtype=np.float64)
        if labels.size == 0:
            return
        self.count += labels.size
        if self.task == tasks.BINARY:
            scores = predictions.reshape(-1)
            buckets = score_buckets(scores)
            positive = labels > 0.5
            self._positive += np.bincount(buckets[positive], minlength=BUCKETS)
            self._negative += np.bincount(buckets[~positive], minlength=BUCKETS)
            self._moments["binary_accuracy"].add(((scores > 0.5) == positive).astype(np.float64))
        elif self.task == tasks.MULTICLASS:
            classes = predictions.argmax(axis=-1) if predictions.ndim > 1 else predictions.reshape(-1)
            self._moments["sparse_categorical_accuracy"].add((classes == labels).astype(np.float64))
        else:
            predictions = predictions.reshape(-1)
            error = predictions - labels
            self._moments["mean_squared_error"].add(error ** 2)
            self._moments["mean_absolute_error"].add(np.abs(error))
            self._moments["mean_absolute_percentage_error"].add(
                100.0 * np.abs(error) / np.maximum(np.abs(labels), _EPSILON))

    def merge(self, other: "Tally") -> None:
        if other.task != self.task:
            raise ValueError("cannot merge tallies of different tasks")
        self.count += other.count
        if self.task == tasks.BINARY:
            self._positive += other._positive
            self._negative += other._negative
        for name, moments in other._moments.items():
            mine = self._moments[name]
            if moments.n:
                n = mine.n + moments.n
                delta = moments.mean - mine.mean
                mine.m2 += moments.m2 + delta * delta * mine.n * moments.n / n
                mine.mean += delta * moments.n / n
                mine.n = n

    def _auc(self) -> tuple[float, float]:
        used = np.flatnonzero(self._positive + self._negative)  # empty buckets add nothing to any sum
        pos, neg = self._positive[used].astype(np.float64), self._negative[used].astype(np.float64)
        n_pos, n_neg = pos.sum(), neg.sum()
        if n_pos < 2 or n_neg < 2:
            return math.nan, math.inf
        neg_below = np.cumsum(neg) - neg
        pos_above = n_pos - np.cumsum(pos)
        v10 = (neg_below + 0.5 * neg) / n_neg   # each positive's share of negatives it outranks
        v01 = (pos_above + 0.5 * pos) / n_pos   # each negative's share of positives above it
        auc = float((pos * v10).sum() / n_pos)
        s10 = float((pos * (v10 - auc) ** 2).sum() / (n_pos - 1))
        s01 = float((neg * (v01 - auc) ** 2).sum() / (n_neg - 1))
        return auc, s10 / n_pos + s01 / n_neg

    def value(self, metric: str) -> float:
        return self.estimate(metric)[0]

    def estimate(self, metric: str) -> tuple[float, float]:
        """(value, variance of the value) of one metric.

        Raises:
          ValueError: a metric this task does not have.
        """
        if metric not in self.metrics:
            raise ValueError(f"metric {metric!r} is not a key metric of a {self.task} task "
                             f"(known: {', '.join(self.metrics)})")
        if metric == "auc":
            return self._auc()
        moments = self._moments[metric]
        return (moments.mean if moments.n else math.nan), moments.variance_of_mean()

    def summary(self, z: float = 1.959964) -> dict:
        """Every key metric with a 95% interval (normal approximation) and the count."""
        out = {"labelled": self.count}
        for metric in self.metrics:
            value, variance = self.estimate(metric)
            width = z * math.sqrt(variance) if math.isfinite(variance) else math.inf
            out[metric] = {"value": value, "low": value - width, "high": value + width}
        if self.task == tasks.BINARY:
            out["positives"] = int(self._positive.sum())
        return out


def difference(canary: Tally, stable: Tally, metric: str) -> tuple[float, float]:
    """(estimate, variance) of how much better the canary is: canary - stable for metrics
    where higher is better, and (stable - canary) / stable, a relative change, for error
    metrics (delta method for its variance)."""
    c, vc = canary.estimate(metric)
    s, vs = stable.estimate(metric)
    if metric in tasks.LOWER_IS_BETTER:
        if not s > 0:
            return math.nan, math.inf
        return (s - c) / s, (vc + (c / s) ** 2 * vs) / (s * s)
    return c - s, vc + vs
