"""The model card (governance/model_card.py): every section, valid against Google's Model
Card schema, values taken from the run record and the config's `model_card:` block."""

import subprocess
import sys

import jsonschema
import pytest
import yaml

from governance import html, model_card
from tests.conftest import REPO, TAXI_CONFIG

RECORD = {
    "pipeline": "taxi", "run_id": "manual__2026-12-01", "outcome": "pushed", "generated_at": "2026-12-01T02:00:00+00:00",
    "push": {"pushed": True, "version": "1796091146", "path": "/srv/serving/taxi/1796091146",
             "signature": {"digest": "sha256:" + "ab" * 32, "key_id": "cd" * 32, "files": 12}},
    "approval": {"decision": "approve", "reviewer": "ana", "decided_at": "2026-12-01T01:00:00+00:00", "comment": "ok"},
    "baseline_model": {"artifact_id": 7},
    "code": {"git_commit": "4d81adf4b9af3e49e61a57c12f4dbe5b9911790b"},
    "trainer": {"run_fn": "pipelines.taxi.model.run_fn", "custom_config": {"hparams": {"hidden_units": [64, 32]}}},
    "training": {"strategy": "default", "precision_policy": "float32", "train_steps": 300, "global_batch_size": 32},
    "data": {"rows": {"train": 150, "eval": 50}, "window": [{"span": 201610}, {"span": 201611}, {"span": 201612}],
             "examples_uri": "/work/pipeline_root/taxi/CsvExampleGen/examples/3"},
    "evaluation": {
        "overall": {"auc": {"candidate": 0.87077, "candidate_interval": [0.81, 0.93], "baseline": 0.86},
                    "example_count": {"candidate": 144.0}},
        "slices": {"trip_start_hour=0": {"auc": {"candidate": 1.0}}},
    },
}


@pytest.fixture(scope="module")
def settings():
    with open(TAXI_CONFIG) as f:
        return yaml.safe_load(f)["model_card"]


def test_every_section_from_the_record_and_the_config(settings):
    card = model_card.build(RECORD, settings)
    model_card.validate(card)  # Google's schema (draft-07), additionalProperties false at the top
    details, considerations = card["model_details"], card["considerations"]
    assert details["version"] == {"name": "1796091146", "date": "2026-12-01", "diff": details["version"]["diff"]}
    assert details["owners"][0]["name"] == "ML platform team" and details["references"]
    assert "Approval: approve by ana" in details["documentation"] and "sha256:abab" in details["documentation"]
    for section in ("users", "use_cases", "limitations", "tradeoffs", "ethical_considerations"):
        assert considerations[section], section
    assert [d["name"] for d in card["model_parameters"]["data"]] == [
        "taxi training window (spans 201610, 201611, 201612)", "taxi evaluation split"]
    assert "150 rows" in card["model_parameters"]["data"][0]["description"]
    auc = next(m for m in card["quantitative_analysis"]["performance_metrics"] if m["type"] == "auc" and "slice" not in m)
    assert auc == {"type": "auc", "value": "0.87077", "confidence_interval": {"lower_bound": "0.81", "upper_bound": "0.93"}}
    assert any(m.get("slice") == "trip_start_hour=0" for m in card["quantitative_analysis"]["performance_metrics"])
    page = html.render({**RECORD, "model_card": card, "nodes": {}})
    assert "<h2>Model card</h2>" in page and "auc 0.87077 [0.81, 0.93]" in page


def test_a_card_that_breaks_the_schema_is_refused(settings):
    card = model_card.build(RECORD, settings)
    with pytest.raises(jsonschema.ValidationError):
        model_card.validate({**card, "approval": "yes"})  # no such top-level section
    with pytest.raises(jsonschema.ValidationError):
        model_card.validate({**card, "model_details": {**card["model_details"], "owners": "ana"}})


def test_the_schemas_formats_are_checked_without_building_an_iri_parser(settings):
    """The uri and date formats the Model Card schema uses are checked; the IRI check, which
    the schema does not use and whose parser took 5-10 s to build in every run's report, is
    not loaded (a fresh process, as a run's is)."""
    card = model_card.build(RECORD, settings)
    with pytest.raises(jsonschema.ValidationError, match="is not a 'uri'"):
        model_card.validate({**card, "model_details": {**card["model_details"], "references": [
            {"reference": "not a uri"}]}})
    with pytest.raises(jsonschema.ValidationError, match="is not a 'date'"):
        model_card.validate({**card, "model_details": {**card["model_details"], "version": {
            **card["model_details"]["version"], "date": "1 December"}}})
    probe = ("import sys; from governance import model_card; v = model_card._jsonschema().Draft7Validator; "
             "print(sorted({'uri', 'date', 'iri'} & set(v.FORMAT_CHECKER.checkers)), 'rfc3987_syntax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["['date',", "'uri']", "False"], out


@pytest.mark.parametrize("block, message", [
    ({"owner": []}, "unknown key"),
    ({"limitations": "none"}, "limitations: expected a list"),
    ({"limitations": [" "]}, "limitations: expected a list of non-empty texts"),
    ({"references": ["see the wiki"]}, "is not an http"),
    ({"owners": [{"name": "x", "email": "y"}]}, r"owners\[0\]"),
    ({"ethical_considerations": [{"risk": "x"}]}, r"ethical_considerations\[0\]"),
])
def test_bad_settings_name_the_key(block, message):
    with pytest.raises(model_card.ModelCardError, match=message):
        model_card.check_settings(block)
