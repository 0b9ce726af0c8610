"""A model card per pushed version, in Google's Model Card schema (v0.0.2, the schema the
Model Card Toolkit reads and writes), so tools that read model cards can use it.

What people decide comes from the pipeline config's `model_card:` block (validated at
load): overview, owners, intended users and use cases, limitations, trade-offs, ethical
considerations (risks and their mitigation), references. What the run measured comes
from its record: the version, the training and evaluation data (spans, rows), the model
architecture, every metric overall and per slice with its confidence interval, and the
approval. Written as `model_card.json` beside the governance report (so it travels with
the pushed model and is signed with it) and rendered in the report.

The schema file ships with the `model-card-toolkit` package, installed without its
dependencies (its jsonschema<4 pin conflicts with Beam's); only the JSON file is read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from core.settings import Settings, SettingsError

SCHEMA_VERSION = "0.0.2"
FILENAME = "model_card.json"
_TEXT_LISTS = ("users", "use_cases", "limitations", "tradeoffs", "references")


class ModelCardError(ValueError):
    """A `model_card:` block that is not what the card needs."""


@dataclasses.dataclass(frozen=True)
class Owner(Settings):
    """A model owner: a name and how to reach them."""

    # A person or a team.
    name: str
    # How to reach the owner.
    contact: str = ""


@dataclasses.dataclass(frozen=True)
class Risk(Settings):
    """An ethical consideration: the risk, and what mitigates it."""

    # The risk, in a sentence.
    name: str
    # What reduces the risk.
    mitigation_strategy: str = ""


@dataclasses.dataclass(frozen=True)
class ModelCardSettings(Settings):
    """The `model_card:` block: what people decide about the model (the run adds what it
    measured). Every list holds non-empty texts; references are http(s) URIs."""

    # What the model is for, in a paragraph.
    overview: str = ""
    # Who answers for the model: {name, contact}.
    owners: tuple[Owner, ...] = ()
    # Who the model's predictions are for.
    users: tuple[str, ...] = ()
    # What it may be used for.
    use_cases: tuple[str, ...] = ()
    # What it must not be relied on for, and where it is known to be weak.
    limitations: tuple[str, ...] = ()
    # Choices made and what they cost (e.g. recall for precision).
    tradeoffs: tuple[str, ...] = ()
    # Risks and how they are mitigated: {name, mitigation_strategy}.
    ethical_considerations: tuple[Risk, ...] = ()
    # Links (http or https) to further material.
    references: tuple[str, ...] = ()

    def check(self) -> None:
        for key in _TEXT_LISTS:
            if not all(v.strip() for v in getattr(self, key)):
                raise SettingsError(f"{key}: expected a list of non-empty texts")
        for ref in self.references:
            if not ref.startswith(("https://", "http://")):
                raise SettingsError(f"references: {ref!r} is not an http(s) URI")


def check_settings(settings: Mapping[str, Any]) -> ModelCardSettings:
    """Validates a `model_card:` block.

    Raises:
      ModelCardError: naming the key.
    """
    try:
        return ModelCardSettings.from_dict(settings)
    except SettingsError as e:
        raise ModelCardError(str(e)) from None


def schema_path() -> str:
    """The Model Card Toolkit's JSON schema file (the package is not imported).

    Raises:
      FileNotFoundError: model-card-toolkit is not installed (make venv installs it).
    """
    spec = importlib.util.find_spec("model_card_toolkit")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("model-card-toolkit is not installed (make venv installs it, without dependencies)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "schema", f"v{SCHEMA_VERSION}", "model_card.schema.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no Model Card schema v{SCHEMA_VERSION} at {path}")
    return path


def _jsonschema():
    """jsonschema, imported without its IRI format check where it is not loaded yet.

    jsonschema registers that check at import when rfc3987-syntax is installed (Jupyter's
    dependencies bring it into the TFX runtime), and rfc3987-syntax builds an Earley parser
    from its grammar when imported: 5-10 s of CPU in every run's report, more than the
    report's other work. The Model Card schema uses the `uri` and `date` formats only,
    which keep their checks (rfc3986-validator, the standard library)."""
    if "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # import raises ImportError
        try:
            import jsonschema
        finally:
            del sys.modules["rfc3987_syntax"]
    import jsonschema

    return jsonschema


def validate(card: Mapping[str, Any]) -> None:
    """Raises jsonschema.ValidationError where the card does not follow the schema."""
    jsonschema = _jsonschema()
    with open(schema_path(), encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER).validate(card)


def _metrics(evaluation: Mapping[str, Any] | None) -> list[dict]:
    out = []
    if not evaluation:
        return out
    groups = [("", evaluation.get("overall") or {})] + sorted((evaluation.get("slices") or {}).items())
    for slice_name, metrics in groups:
        for name, roles in sorted(metrics.items()):
            if "candidate" not in roles:
                continue
            entry = {"type": name, "value": f"{roles['candidate']:.5g}"}
            if slice_name:
                entry["slice"] = slice_name
            interval = roles.get("candidate_interval")
            if interval:
                entry["confidence_interval"] = {"lower_bound": f"{interval[0]:.5g}", "upper_bound": f"{interval[1]:.5g}"}
            out.append(entry)
    return out


def _datasets(record: Mapping[str, Any]) -> list[dict]:
    data = record.get("data") or {}
    rows = data.get("rows") or {}
    window = data.get("window") or []
    spans = ", ".join(str(w["span"]) for w in window)
    out = []
    if window:
        out.append({"name": f"{record['pipeline']} training window (spans {spans})",
                    "description": f"Training split of spans {spans}: {rows.get('train', '?')} rows, "
                                   f"ingested by CsvExampleGen/ImportExampleGen from {data.get('examples_uri', '?')}."})
    if rows.get("eval") is not None or record.get("evaluation"):
        count = ((record.get("evaluation") or {}).get("overall") or {}).get("example_count", {}).get("candidate")
        out.append({"name": f"{record['pipeline']} evaluation split",
                    "description": f"Eval split of the same window: {rows.get('eval', '?')} rows"
                                   + (f"; {int(count)} examples scored by TFMA" if count else "") + "."})
    return out


def build(record: Mapping[str, Any], settings: Mapping[str, Any]) -> dict:
    """The model card of a pushed version from its run record (a report dict) and the
    config's `model_card:` block."""
    push = record.get("push") or {}
    approval = record.get("approval")
    trainer = record.get("trainer") or {}
    hparams = (trainer.get("custom_config") or {}).get("hparams") or {}
    training = record.get("training") or {}
    generated = str(record.get("generated_at") or "")[:10]
    baseline = record.get("baseline_model")
    documentation = [
        f"Trained and pushed by the {record['pipeline']} pipeline, run {record['run_id']}; "
        f"outcome {record.get('outcome')}.",
        f"Code: git {((record.get('code') or {}).get('git_commit') or '?')[:12]}.",
    ]
    if approval:
        documentation.append(f"Approval: {approval.get('decision')} by {approval.get('reviewer')} at "
                             f"{approval.get('decided_at')}: {approval.get('comment') or ''}")
    if push.get("signature"):
        documentation.append(f"Signed: {push['signature'].get('digest')} (signer key {push['signature'].get('key_id')}).")
    card = {
        "schema_version": SCHEMA_VERSION,
        "model_details": {
            "name": record["pipeline"],
            "overview": settings.get("overview") or "",
            "documentation": " ".join(documentation),
            "owners": [dict(o) for o in settings.get("owners", [])],
            "version": {
                "name": str(push.get("version") or ""),
                "date": generated,
                "diff": (f"Candidate vs the baseline model (MLMD artifact {baseline.get('artifact_id')}): "
                         "see quantitative_analysis and the governance report.") if baseline else "First model.",
            },
            "references": [{"reference": r} for r in settings.get("references", [])],
            "path": push.get("path") or "",
        },
        "model_parameters": {
            "model_architecture": (f"{trainer.get('run_fn', '?')} with hparams "
                                   f"{json.dumps(hparams, sort_keys=True)}; {training.get('strategy', '?')} strategy, "
                                   f"{training.get('precision_policy', '?')} precision, "
                                   f"{training.get('train_steps', '?')} steps of {training.get('global_batch_size', '?')}"),
            "data": _datasets(record),
            "input_format": "serialized tf.Example protos (signature serving_default, input 'examples')",
            "output_format": "see the SavedModel's signatures (TF Serving's /metadata lists them)",
        },
        "quantitative_analysis": {"performance_metrics": _metrics(record.get("evaluation"))},
        "considerations": {
            "users": [{"description": u} for u in settings.get("users", [])],
            "use_cases": [{"description": u} for u in settings.get("use_cases", [])],
            "limitations": [{"description": u} for u in settings.get("limitations", [])],
            "tradeoffs": [{"description": u} for u in settings.get("tradeoffs", [])],
            "ethical_considerations": [dict(r) for r in settings.get("ethical_considerations", [])],
        },
    }
    validate(card)
    return card
