"""The maturity rule: which labelled requests are old enough to compare (rollout/maturity.py)."""

import math

import numpy as np

from rollout import maturity


def _pava_horizon(total, labelled, q):
    curve = maturity.labelled_by_age(total, labelled)
    ok = np.flatnonzero((curve >= q - 1e-12) & (np.asarray(total) > 0))
    return float(maturity.EDGES[ok[0]]) if ok.size else math.inf


def test_the_horizon_is_where_the_isotonic_estimate_first_reaches_the_quantile():
    rng = np.random.default_rng(0)
    for _ in range(200):
        used = np.sort(rng.choice(len(maturity.EDGES), rng.integers(1, 40), replace=False))
        total, labelled = np.zeros(len(maturity.EDGES), np.int64), np.zeros(len(maturity.EDGES), np.int64)
        total[used] = rng.integers(1, 30, used.size)
        labelled[used] = rng.binomial(total[used], rng.random(used.size))
        q = float(rng.random())
        assert maturity.horizon(total, labelled, q) == _pava_horizon(total, labelled, q)
        curve = maturity.labelled_by_age(total, labelled)[used]
        assert np.all(np.diff(curve) >= -1e-12)  # non-decreasing in age


def test_the_share_labelled_by_age_estimates_the_delay_distribution_from_current_status():
    """Requests arriving steadily, labels after an exponential delay (mean 1 h): the estimate
    at each age is the delay's distribution function there, and the 0.95 horizon is its
    0.95 quantile, 3 h, though most delays seen so far are short."""
    rng = np.random.default_rng(1)
    now = 48 * 3600.0
    logged = rng.random(1_000_000) * now
    delay = rng.exponential(3600.0, logged.size)
    total, labelled = maturity.counts(now - logged, logged + delay <= now)
    horizon = maturity.horizon(total, labelled, 0.95)
    assert abs(horizon - 3600 * math.log(20)) < 0.1 * 3600 * math.log(20)
    curve = maturity.labelled_by_age(total, labelled)
    full = total >= 1000  # buckets of 1,000 requests or more: a share's standard error under 0.016
    middle = np.sqrt(maturity.EDGES[:-1] * maturity.EDGES[1:])[full[:-1]]
    assert np.max(np.abs(curve[:-1][full[:-1]] - (1 - np.exp(-middle / 3600)))) < 0.06


def test_a_young_canary_whose_slow_labels_have_not_begun_has_no_mature_requests():
    """Six hours in, only the fast labels (a third of requests, within minutes) have come:
    quantiles of the delays seen so far would call requests minutes old mature; the estimate
    counts the unlabelled ones and finds no age labelled 95% of the time."""
    rng = np.random.default_rng(2)
    now = 6 * 3600.0
    logged = rng.random(30_000) * now
    fast = rng.random(logged.size) < 1 / 3
    delay = np.where(fast, rng.exponential(300.0, logged.size), rng.exponential(24 * 3600.0, logged.size))
    seen = logged + delay <= now
    assert np.quantile(delay[seen], 0.95) < now  # the delays seen so far would say: mature within hours
    assert maturity.horizon(*maturity.counts(now - logged, seen), 0.95) == math.inf


def test_right_after_a_batch_of_labels_every_request_it_covers_is_mature():
    logged = np.arange(0, 7200, 2.0)
    total, labelled = maturity.counts(7300 - logged, np.ones(logged.size, bool))
    assert maturity.horizon(total, labelled, 0.95) <= 100  # the youngest request is 100 s old
    assert maturity.horizon(np.zeros(len(maturity.EDGES)), np.zeros(len(maturity.EDGES)), 0.95) == math.inf
