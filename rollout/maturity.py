"""Which labelled requests are old enough to compare: the censoring-correct maturity rule.

Labels arrive late, and not equally late for every prediction: the labels of flagged
examples may come within the hour, the others' after days. Compared as they arrive, the
two versions are then measured on different mixes of their requests (those whose labels
happened to come first), and the comparison is biased whenever the versions flag
differently. So only *mature* requests are compared: those at least `H` old, where `H` is
the age by which a `maturity_quantile` share (0.95) of requests have their label, in each
arm (the larger of the two arms' ages). Among mature requests at most 1 - q of either arm
are still unlabelled, whatever the delay depends on.

The share labelled by age is estimated from what is known now, censoring-correctly: each
split-routed request is one observation of "labelled by its age" (current-status data: the
label delay is only known to be below or above the request's age), and the nonparametric
maximum-likelihood estimate of the delay's distribution from such data is the isotonic
(non-decreasing) regression of the labelled indicator on age (Groeneboom and Wellner,
"Information Bounds and Nonparametric Maximum Likelihood Estimation", 1992, part II; Jewell
and van der Laan, "Current status data: review, recent developments and open problems",
2004). Unlike quantiles of the delays observed so far, it counts the requests whose label has
not come yet, so a young canary whose slow labels have not begun to arrive has no mature
requests rather than a sample of its fast ones. A request that will never be labelled counts
as not yet labelled: `maturity_quantile` must stay below the share of requests that ever get
a label. Labels that come in batches are handled the same way: right after a batch every
request it covers is labelled, whatever its age.

Ages go into log-spaced buckets (1 s to about 3 years, 5% apart), so the estimate takes fixed
memory. The horizon is read off the isotonic regression's min-max formula (Robertson, Wright
and Dykstra, "Order Restricted Statistical Inference", 1988, chapter 1) in a few vector
operations; `labelled_by_age` gives the whole curve by pooling adjacent violators. TF-free.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_QUANTILE = 0.95
EDGES = np.concatenate([[0.0], np.geomspace(1.0, 1e8, 379)])  # age bucket i: [EDGES[i], EDGES[i + 1])


def buckets(ages) -> np.ndarray:
    """The age bucket of each age in seconds (negative ages, a clock ahead, go to the first)."""
    return np.clip(np.searchsorted(EDGES, np.asarray(ages, dtype=np.float64), side="right") - 1, 0, len(EDGES) - 1)


def counts(ages, labelled) -> tuple[np.ndarray, np.ndarray]:
    """(requests, labelled requests) per age bucket."""
    index = buckets(ages)
    total = np.bincount(index, minlength=len(EDGES))
    done = np.bincount(index, weights=np.asarray(labelled, dtype=np.float64), minlength=len(EDGES))
    return total.astype(np.int64), done.astype(np.int64)


def labelled_by_age(total: np.ndarray, labelled: np.ndarray) -> np.ndarray:
    """The isotonic estimate of the share labelled by each bucket's age (NaN where a bucket is
    empty): the NPMLE of the label delay's distribution function from current-status data,
    by pooling adjacent violators."""
    total = np.asarray(total, dtype=np.float64)
    labelled = np.asarray(labelled, dtype=np.float64)
    out = np.full(total.shape, np.nan)
    full = np.flatnonzero(total > 0)
    blocks: list[list[float]] = []  # [labelled, requests, buckets in the block]
    for w, y in zip(total[full], labelled[full]):
        blocks.append([y, w, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            y2, w2, n2 = blocks.pop()
            blocks[-1] = [blocks[-1][0] + y2, blocks[-1][1] + w2, blocks[-1][2] + n2]
    out[full] = np.repeat([y / w for y, w, _ in blocks], [n for _, _, n in blocks])
    return out


def horizon(total: np.ndarray, labelled: np.ndarray, quantile: float) -> float:
    """The youngest age from which the estimated share labelled is at least `quantile`
    (seconds; infinite when no age reaches it), from per-bucket counts (`counts`).

    F(b) >= q holds exactly when min_{j >= b} S_j >= min_{i < b} S_i, S the prefix sums of
    labelled - q * requests over non-empty buckets (the min-max formula rearranged)."""
    total = np.asarray(total, dtype=np.float64)
    full = np.flatnonzero(total > 0)
    if not full.size:
        return math.inf
    c = np.asarray(labelled, dtype=np.float64)[full] - quantile * total[full]
    s = np.cumsum(c)
    before = np.minimum.accumulate(np.concatenate([[0.0], s[:-1]]))
    after = np.minimum.accumulate(s[::-1])[::-1]
    ok = np.flatnonzero(after >= before - 1e-9 * total[full].sum())
    return float(EDGES[full[ok[0]]]) if ok.size else math.inf
