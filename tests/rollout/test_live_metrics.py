"""Live metrics have the Evaluator's definitions, in bounded memory."""

import math

import numpy as np
import pytest

from core import tasks
from rollout import live_metrics


def _exact_auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return greater / (len(pos) * len(neg))


def test_bucketed_auc_matches_the_exact_auc_and_delong_matches_the_bootstrap():
    rng = np.random.default_rng(0)
    labels = (rng.random(3000) < 0.3).astype(int)
    scores = 1 / (1 + np.exp(-(rng.normal(size=3000) + 1.2 * labels)))
    tally = live_metrics.Tally(tasks.BINARY)
    for chunk in range(0, 3000, 700):  # streamed in pieces
        tally.add(scores[chunk:chunk + 700], labels[chunk:chunk + 700])
    auc, variance = tally.estimate("auc")
    assert auc == pytest.approx(_exact_auc(scores, labels), abs=2e-4)
    boots = []
    for _ in range(200):
        i = rng.integers(0, 3000, 3000)
        boots.append(_exact_auc(scores[i], labels[i]))
    assert math.sqrt(variance) == pytest.approx(np.std(boots), rel=0.25)


def test_accuracy_and_regression_errors_are_the_keras_definitions():
    binary = live_metrics.Tally(tasks.BINARY)
    binary.add([0.2, 0.6, 0.5, 0.9], [0, 1, 1, 0])
    assert binary.value("binary_accuracy") == pytest.approx(0.5)  # 0.5 is not > 0.5: predicts 0
    regression = live_metrics.Tally(tasks.REGRESSION)
    regression.add([1.0, 3.0, 0.5], [2.0, 3.0, 0.0])
    assert regression.value("mean_squared_error") == pytest.approx((1 + 0 + 0.25) / 3)
    assert regression.value("mean_absolute_error") == pytest.approx(1.5 / 3)
    assert regression.value("mean_absolute_percentage_error") == pytest.approx(100 * (0.5 + 0 + 0.5 / 1e-7) / 3)
    multi = live_metrics.Tally(tasks.MULTICLASS)
    multi.add([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]], [1, 1, 1])
    assert multi.value("sparse_categorical_accuracy") == pytest.approx(2 / 3)


def test_merged_tallies_equal_one_tally_of_everything():
    rng = np.random.default_rng(1)
    scores, labels = rng.random(500), (rng.random(500) < 0.4).astype(int)
    whole, a, b = (live_metrics.Tally(tasks.BINARY) for _ in range(3))
    whole.add(scores, labels)
    a.add(scores[:123], labels[:123])
    b.add(scores[123:], labels[123:])
    a.merge(b)
    for metric in ("auc", "binary_accuracy"):
        assert a.estimate(metric) == pytest.approx(whole.estimate(metric))


def test_the_difference_is_oriented_so_that_positive_means_the_canary_is_better():
    stable, canary = live_metrics.Tally(tasks.REGRESSION), live_metrics.Tally(tasks.REGRESSION)
    stable.add([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0])  # MSE 1
    canary.add([1.5, 2.5, 3.5, 4.5], [2.0, 3.0, 4.0, 5.0])  # MSE 0.25
    estimate, _ = live_metrics.difference(canary, stable, "mean_squared_error")
    assert estimate == pytest.approx(0.75)  # a quarter of the error: 75% better
    with pytest.raises(ValueError, match="not a key metric"):
        canary.estimate("auc")
