"""The sample-ratio-mismatch check: did the split send the canary the share it was given?

A canary's comparison is only as good as its split. When the realised share of split-routed
requests that reached the canary differs from `canary_share` by more than chance allows,
something other than the key rule chose who went where (a version that failed to load and
had its requests answered by the other, logs lost for one version, clients retrying into one
arm), and the two arms no longer hold the same population. The check is Pearson's chi-square
goodness-of-fit test with one degree of freedom on the two arms' request counts, at a small
significance level (`rollout.srm_alpha`, 0.001), as Fabijan, Gupchup, Gupta, Omhover, Qin,
Vermeer and Dmitriev recommend in "Diagnosing Sample Ratio Mismatch in Online Controlled
Experiments", KDD 2019. A mismatch blocks the decision (rollout/verdict.py). TF-free,
numpy-free.
"""

from __future__ import annotations

import dataclasses
import math

# Below this many expected requests in either arm the chi-square approximation is not used
# (Cochran's rule of thumb) and the check says it has too few to judge.
MIN_EXPECTED = 5.0


@dataclasses.dataclass(frozen=True)
class Check:
    stable: int
    canary: int
    share: float  # the configured canary_share
    alpha: float
    chi_square: float | None
    p_value: float | None

    @property
    def total(self) -> int:
        return self.stable + self.canary

    @property
    def realised(self) -> float | None:
        return self.canary / self.total if self.total else None

    @property
    def mismatch(self) -> bool:
        return self.p_value is not None and self.p_value < self.alpha

    @property
    def judged(self) -> bool:
        return self.p_value is not None

    def to_dict(self) -> dict:
        return {"stable_requests": self.stable, "canary_requests": self.canary, "canary_share": self.share,
                "realised_share": self.realised, "chi_square": self.chi_square, "p_value": self.p_value,
                "alpha": self.alpha, "mismatch": self.mismatch, "judged": self.judged,
                "method": "Pearson chi-square, 1 degree of freedom (Fabijan et al., KDD 2019)"}

    def reason(self) -> str:
        return (f"sample-ratio mismatch: the canary got {self.canary} of {self.total} split-routed requests "
                f"({100 * self.realised:.2f}%) where its share is {100 * self.share:g}% (chi-square "
                f"{self.chi_square:.1f}, p = {self.p_value:.2g} < {self.alpha:g}): the arms no longer hold the same "
                "population, so their comparison is not used")


def check(stable: int, canary: int, share: float, alpha: float) -> Check:
    """The chi-square test of `canary` of `stable + canary` requests against `share`."""
    total = stable + canary
    if total * min(share, 1 - share) < MIN_EXPECTED:
        return Check(stable, canary, share, alpha, None, None)
    expected_c, expected_s = total * share, total * (1 - share)
    chi = (canary - expected_c) ** 2 / expected_c + (stable - expected_s) ** 2 / expected_s
    # The chi-square survival function with one degree of freedom: P(Z^2 > chi) = erfc(sqrt(chi / 2)).
    return Check(stable, canary, share, alpha, chi, math.erfc(math.sqrt(chi / 2)))
