"""The gate's measures on real TFDV statistics of synthetic columns with known answers."""

import numpy as np
import pandas as pd
import pytest
import tensorflow_data_validation as tfdv

from components.data_gate import measures


def _stats(frame: pd.DataFrame):
    return tfdv.generate_statistics_from_dataframe(frame, stats_options=measures.stats_options())


@pytest.fixture(scope="module")
def base():
    rng = np.random.default_rng(0)
    miles = np.where(rng.random(2000) < 0.3, 0.0, rng.lognormal(0.3, 0.9, 2000))
    return pd.DataFrame({
        "miles": miles,
        "hour": rng.integers(0, 24, 2000),
        "kind": rng.choice(["cash", "card", "other"], 2000, p=[0.5, 0.4, 0.1]),
    })


def _pair(base, changed):
    return measures.measure_pair(_stats(changed), _stats(base), list(base.columns))


def test_identical_data_measures_zero(base):
    m = _pair(base, base)
    assert m["miles"]["ks"] == 0 and m["miles"]["scale"] == 0 and m["miles"]["jsd"] == pytest.approx(0, abs=1e-9)
    assert m["kind"]["linf"] == pytest.approx(0) and m["kind"]["missing_share"] == 0
    assert m["miles"]["n_eff"] == pytest.approx(1000)


def test_a_change_of_unit_reads_as_its_factor_despite_the_zeros(base):
    changed = base.assign(miles=base.miles * 1.609)
    m = _pair(base, changed)
    assert m["miles"]["scale"] == pytest.approx(np.log(1.609), abs=0.02)
    assert m["miles"]["ks"] > 0.1  # the nonzero part moved
    # More zeros (a share change) is not a change of unit.
    more_zeros = base.assign(miles=np.where(np.arange(2000) % 5 == 0, 0.0, base.miles))
    assert _pair(base, more_zeros)["miles"]["scale"] < 0.1


def test_ks_is_not_moved_by_one_outlier_and_handles_whole_values(base):
    outlier = base.copy()
    outlier.loc[0, "miles"] = 10_000.0
    assert _pair(base, outlier)["miles"]["ks"] < 0.01
    # Whole values: three hours later moves an eighth of the mass past every hour.
    shifted = base.assign(hour=base.hour + 3)
    assert _pair(base, shifted)["hour"]["ks"] == pytest.approx(3 / 24, abs=0.03)


def test_missing_share_counts_missing_values_and_category_share_moves_linf(base):
    blanked = base.copy()
    blanked.loc[: 1199, "kind"] = None
    m = _pair(base, blanked)
    assert m["kind"]["missing_share"] == pytest.approx(0.6) and m["kind"]["baseline_missing_share"] == 0
    collapsed = base.assign(kind=base.kind.replace("cash", "card"))
    assert _pair(base, collapsed)["kind"]["linf"] == pytest.approx(0.5, abs=0.05)
