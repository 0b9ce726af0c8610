"""The sample-ratio-mismatch check and how it blocks a decision."""

import math

import numpy as np

from core import tasks
from rollout import live_metrics, sequential, srm, verdict
from rollout.settings import RolloutSettings


def test_the_chi_square_test_of_the_realised_share():
    check = srm.check(930, 70, 0.1, 0.001)  # 100 expected on the canary
    assert math.isclose(check.chi_square, 10.0) and math.isclose(check.p_value, math.erfc(math.sqrt(5)))
    assert check.p_value > 0.001 and not check.mismatch and check.realised == 0.07
    assert srm.check(9300, 700, 0.1, 0.001).mismatch  # the same share on ten times the requests
    assert not srm.check(9010, 990, 0.1, 0.001).mismatch
    too_few = srm.check(30, 1, 0.1, 0.001)
    assert not too_few.judged and not too_few.mismatch and too_few.to_dict()["p_value"] is None


def test_a_mismatch_blocks_a_decision_the_test_would_make_and_says_why():
    rng = np.random.default_rng(0)
    stable, canary = live_metrics.Tally(tasks.BINARY), live_metrics.Tally(tasks.BINARY)
    for tally, separation in ((stable, 1.2), (canary, -1.2)):  # a canary far worse: the test says roll back
        y = rng.random(3000) < 0.3
        tally.add(1 / (1 + np.exp(-(rng.normal(size=3000) + separation * y))), y)
    settings = RolloutSettings(mode="canary")
    assert verdict.judge(canary, stable, "auc", settings, 5.0, srm.check(2700, 300, 0.1, 0.001)).action == "rollback"
    blocked = verdict.judge(canary, stable, "auc", settings, 5.0, srm.check(2800, 200, 0.1, 0.001))
    assert blocked.action == sequential.INCONCLUSIVE and blocked.blocked_by == "srm"
    assert blocked.reason.startswith("sample-ratio mismatch: the canary got 200 of 3000")
    assert blocked.alerts and blocked.alerts[0].startswith(verdict.SRM_ALERT)
    assert blocked.test is not None and blocked.test["labels"] == {"stable": 3000, "canary": 3000}
