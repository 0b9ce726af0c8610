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

import importlib.util
import json
import os
from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = "0.0.2"
FILENAME = "model_card.json"
_TEXT_LISTS = ("users", "use_cases", "limitations", "tradeoffs", "references")
_KEYS = {"overview", "owners", "ethical_considerations", *_TEXT_LISTS}


class ModelCardError(ValueError):
    """A `model_card:` block that is not what the card needs."""


def check_settings(settings: Mapping[str, Any]) -> None:
    """Validates a `model_card:` block.

    Raises:
      ModelCardError: naming the key.
    """
    unknown = sorted(set(settings) - _KEYS)
    if unknown:
        raise ModelCardError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    if not isinstance(settings.get("overview", ""), str):
        raise ModelCardError("overview: expected text")
    for key in _TEXT_LISTS:
        value = settings.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ModelCardError(f"{key}: expected a list of non-empty texts")
    for ref in settings.get("references", []):
        if not ref.startswith(("https://", "http://")):
            raise ModelCardError(f"references: {ref!r} is not an http(s) URI")
    for i, owner in enumerate(settings.get("owners", [])):
        if not isinstance(owner, Mapping) or not isinstance(owner.get("name"), str) or set(owner) - {"name", "contact"}:
            raise ModelCardError(f"owners[{i}]: expected {{name: ..., contact: ...}}")
    for i, risk in enumerate(settings.get("ethical_considerations", [])):
        if not isinstance(risk, Mapping) or not isinstance(risk.get("name"), str) \
                or set(risk) - {"name", "mitigation_strategy"}:
            raise ModelCardError(f"ethical_considerations[{i}]: expected {{name: ..., mitigation_strategy: ...}}")


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


def validate(card: Mapping[str, Any]) -> None:
    """Raises jsonschema.ValidationError where the card does not follow the schema."""
    import jsonschema

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
