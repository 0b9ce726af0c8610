"""`retrain new` finds a span's event time and the fields derived from it; a Parquet span folder
gives the plan its CSV gives."""

import os

import numpy as np
import pandas as pd

from runner import scaffold
from tests.conftest import TAXI_DATA


def test_the_taxi_timestamp_and_its_derived_fields_are_found():
    spans = [201610, 201611, 201612]
    frame, row_spans = scaffold._read_frame(TAXI_DATA, spans, "csv")
    found = scaffold.propose_span_consistency(frame, row_spans, "tips")
    assert found == {"event_time": {"feature": "trip_start_timestamp", "unit": "s", "timezone": "UTC"},
                     "tolerance_hours": 1,
                     "derived": {"trip_start_month": "month", "trip_start_hour": "hour", "trip_start_day": "weekday_sun1"}}
    # The event time and the month are functions of the span: drift does not watch them.
    assert set(scaffold.drift_opt_outs(found)) == {"trip_start_timestamp", "trip_start_month"}


def _frame(times: pd.DatetimeIndex, **columns):
    return pd.DataFrame({**columns}), pd.Series(times.year * 100 + times.month, dtype="int64")


def test_milliseconds_and_iso_text_are_found_with_their_unit():
    rng = np.random.default_rng(1)
    times = pd.to_datetime("2024-01-01", utc=True) + pd.to_timedelta(rng.integers(0, 90 * 86400, 500), unit="s")
    ms = (times.view("int64") // 1_000_000).astype(str)
    frame, row_spans = _frame(times, created=ms, dow=(times.dayofweek + 1).astype(str), y=rng.random(500).astype(str))
    found = scaffold.propose_span_consistency(frame, row_spans, "y")
    assert found["event_time"] == {"feature": "created", "unit": "ms", "timezone": "UTC"}
    assert found["derived"] == {"dow": "weekday_iso"}
    frame, row_spans = _frame(times, at=times.strftime("%Y-%m-%dT%H:%M:%SZ"), y=rng.random(500).astype(str))
    assert scaffold.propose_span_consistency(frame, row_spans, "y")["event_time"]["unit"] == "iso8601"


def test_no_event_time_is_proposed_where_none_fits_its_span():
    rng = np.random.default_rng(2)
    times = pd.to_datetime("2024-01-01", utc=True) + pd.to_timedelta(rng.integers(0, 90 * 86400, 300), unit="s")
    # Times of another month than the row's span (a signup date): not the event time.
    frame, row_spans = _frame(times, signup=(times.view("int64") // 10**9 - 200 * 86400).astype(str),
                              x=rng.random(300).astype(str))
    assert scaffold.propose_span_consistency(frame, row_spans, "x") is None
    assert scaffold.drift_opt_outs(None) == {}


def test_a_small_window_gets_an_eval_size_it_can_reach_and_a_warning(tmp_path):
    import yaml

    from runner import datasets
    from tests.conftest import REPO

    rows = datasets.write_spans("wine", str(tmp_path / "data"), num_spans=4)
    plan = scaffold.plan(REPO, "my_small", str(tmp_path / "data"), "cultivar")
    size = plan.eval_size
    assert size.expected == int(sum(rows.values()) * scaffold.EVAL_SHARE)  # four months: all in the window
    assert size.low < size.expected < scaffold.DEFAULT_MIN_EVAL * 4
    config = yaml.safe_load(scaffold.render(plan)["pipelines/my_small/config.yaml"])
    if size.min_eval is None:
        assert "min_eval_examples" not in config and plan.eval_size.advice() is None
    else:
        assert config["min_eval_examples"] == size.min_eval <= size.low
        assert f"about {size.expected} examples" in size.advice()


def test_eval_size_advice_names_the_numbers():
    few = scaffold.EvalSize(expected=43, low=26, min_eval=20, window_rows=172)
    assert "about 43 examples" in few.advice() and "min_eval_examples: 20" in few.advice()
    assert "Even min_eval_examples 10 may not be reached" in scaffold.EvalSize(8, 2, 10, 32).advice()
    assert scaffold.EvalSize(500, 440, None, 2000).advice() is None


def test_columns_that_look_like_personal_data_or_identifiers_are_forbidden_and_not_logged(tmp_path):
    import csv
    import glob

    import yaml

    from core import feature_policy
    from runner import datasets
    from tests.conftest import REPO

    datasets.write_spans("wine", str(tmp_path / "data"), num_spans=4)
    n = 0
    for path in sorted(glob.glob(str(tmp_path / "data" / "span-*" / "*.csv"))):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            n += 1
            # An id by name, e-mail addresses by value, a unique code by its values alone,
            # and a plain category that must stay a feature.
            row.update(customerId=str(1000 + n), contact=f"rider{n}@example.com", ref=f"R{n * 7919:08d}",
                       shelf="abc"[n % 3])
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    plan = scaffold.plan(REPO, "my_private", str(tmp_path / "data"), "cultivar")
    assert set(plan.identifiers) == {"customerId", "contact", "ref"}
    assert plan.identifiers["contact"] == ("personal", "its values are e-mail addresses")
    assert plan.identifiers["customerId"][0] == "pseudonymous" and plan.identifiers["customerId"][1] == "its name (customer, id) says an identifier"
    assert "shelf" in plan.vocab and not set(plan.identifiers) & set(plan.vocab + plan.numeric + plan.bucket)
    files = scaffold.render(plan)
    policy = feature_policy.parse(yaml.safe_load(files["schemas/my_private/feature_policy.yaml"]), "generated")
    feature_policy.check_features(policy, scaffold._schema_types(plan.schema_text))  # one entry per column
    assert set(policy.forbidden) == {"customerId", "contact", "ref"}
    assert all(policy.log_action(c) == "drop" for c in plan.identifiers) and policy.log_action("shelf") == "keep"
    assert policy.not_ingested == ["contact", "customerId", "ref"]  # never stored by the pipeline either
    assert "review before allowing it" in policy.forbidden["ref"]
    # The generated code names none of them (a comment says why they are left out), and
    # the config points at the policy.
    import ast

    code = files["pipelines/my_private/features.py"]
    literals = {n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant)}
    assert not literals & set(plan.identifiers) and "shelf" in literals
    assert "contact (its values are e-mail addresses: forbidden in schemas/my_private/feature_policy.yaml" in code
    assert yaml.safe_load(files["pipelines/my_private/config.yaml"])["feature_policy"] == (
        "../../schemas/my_private/feature_policy.yaml")


def test_the_network_is_sized_to_the_training_split(tmp_path):
    # Few rows get one hidden layer and half the passes (a larger network learns their noise);
    # the same data at a hundred times the rows gets the default network.
    import dataclasses

    import yaml

    from runner import datasets
    from tests.conftest import REPO

    datasets.write_spans("wine", str(tmp_path / "data"), num_spans=4)
    small = scaffold.plan(REPO, "my_small", str(tmp_path / "data"), "cultivar")
    large = dataclasses.replace(small, rows=small.rows * 100)
    for plan, units, passes in ((small, [32], scaffold.EPOCHS // 2), (large, [64, 32], scaffold.EPOCHS)):
        files = scaffold.render(plan)
        text = files["pipelines/my_small/config.yaml"]
        config = yaml.safe_load(text)
        assert config["hparams"]["hidden_units"] == units
        assert f"About {passes} passes" in text
        assert f"hidden_units: tuple[int, ...] = {tuple(units)!r}" in files["pipelines/my_small/hparams.py"]
        assert ("A small training split" in text) == (plan is small)
    assert yaml.safe_load(scaffold.render(large)["pipelines/my_small/config.yaml"])["train_steps"] == 1000


def test_a_parquet_span_folder_gives_the_csv_folders_plan_and_a_parquet_config(tmp_path):
    # The same months as CSV and as Parquet (pandas' to_parquet, as a notebook exports them):
    # the same columns, types, task and roles, and a config that reads Parquet.
    import glob

    import yaml

    from runner import datasets
    from tests.conftest import REPO

    datasets.write_spans("wine", str(tmp_path / "csv"), num_spans=3)
    for path in sorted(glob.glob(str(tmp_path / "csv" / "span-*" / "data.csv"))):
        folder = tmp_path / "parquet" / os.path.basename(os.path.dirname(path))
        folder.mkdir(parents=True)
        pd.read_csv(path).to_parquet(folder / "data.parquet")
    as_csv = scaffold.plan(REPO, "my_wine", str(tmp_path / "csv"), "cultivar")
    plan = scaffold.plan(REPO, "my_wine", str(tmp_path / "parquet"), "cultivar")
    assert plan.example_format == "parquet" and as_csv.example_format == "csv"
    assert scaffold._schema_types(plan.schema_text) == scaffold._schema_types(as_csv.schema_text)
    for field in ("rows", "label_type", "task", "numeric", "bucket", "categorical", "vocab", "classes", "identifiers"):
        assert getattr(plan, field) == getattr(as_csv, field), field
    files = scaffold.render(plan)
    assert yaml.safe_load(files["pipelines/my_wine/config.yaml"])["example_format"] == "parquet"
