"""Label health: the label as the pipeline defines it, computed by the gate and checked like a feature.

The gate watches raw columns, so a month whose *derived* label went wrong (constant, or a
positive rate far from its history) passed while the raw columns it comes from stayed
within their limits. Here the gate computes the label with the pipeline's own `label_fn`
(the function its `preprocessing_fn` calls for the label: one home), on the span's
tf.Examples parsed exactly as Transform parses them (the schema's feature spec), and checks:
- **missing**: rows where a column the label reads has no value (their label is a fill
  value, not data), against the share calibration allows (`policy.share_exceeded`);
- **constant**: one class in every labelled row, where the reference's class shares make
  that improbable (p < alpha), or a regression label with one value;
- **classes**: each class's share against the pooled shares of the reference (the
  `reference_spans` spans that passed before it), as a two-sample z whose limit
  calibration sets from the history's own month-to-reference values (never below NULL_Z);
- **distribution** (regression): the Kolmogorov-Smirnov distance and the scale change
  (`measures`) against the reference's pooled quantiles, in units of their sampling noise,
  with calibrated limits as the drift measures have.
The reference travels in each passed report (this span's label facts plus its own
reference, up to `reference_spans` spans), so the gate needs no other input.
"""

from __future__ import annotations

import collections
import importlib
import math
from collections.abc import Mapping

import numpy as np

from components.data_gate import measures
from components.data_gate import policy as policy_lib

QUANTILES = 101
# No calibrated class limit is below a two-sided 0.1% normal quantile (in units of noise).
NULL_Z = 3.29
# Limits where the policy has no calibrated label section (strict, labelled "default").
DEFAULT_K = {"classes": 5.0, "ks": 3.0, "scale": 3.0}
# Regression values kept per span for its quantiles (a seeded sample above it).
MAX_VALUES = 200_000
CLASSES, NUMERIC = "classes", "numeric"


class LabelError(ValueError):
    """A label function that cannot be used (not found, not callable, not a tensor of one value per row)."""


def load_fn(dotted: str):
    """The label function `module.function`.

    Raises:
      LabelError: the module or function is not there, or not callable.
    """
    module, _, name = dotted.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise LabelError(f"label_fn {dotted!r}: cannot import it ({e})") from e
    if not callable(fn):
        raise LabelError(f"label_fn {dotted!r} is not a function")
    return fn


class _Unparsed(Exception):
    """The label function read a feature that does not parse with the schema's type."""


class _Uncomputable(Exception):
    """The label cannot be computed on this span's data (a source of the wrong type)."""


class _Recording(dict):
    """The inputs mapping a label function receives, noting which features it reads."""

    def __init__(self, values, unparsed=None):
        super().__init__(values)
        self.read: list[str] = []
        self.unparsed = dict(unparsed or {})

    def __contains__(self, key):
        return super().__contains__(key) or key in self.unparsed

    def __getitem__(self, key):
        if key not in self.read:
            self.read.append(key)
        if key in self.unparsed:
            raise _Unparsed(f"feature {key!r} does not parse with the schema's type: {self.unparsed[key]}")
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default


class Tally:
    """Computes the label of a span's rows, a batch at a time, and counts what it needs.

    Args:
      label_fn: dotted path of the pipeline's label function.
      schema: the curated Schema proto (its feature spec parses the examples as Transform does).
      kind: CLASSES (an integer class per row) or NUMERIC (a regression target).
      seed: for the sample of regression values above MAX_VALUES.
    """

    def __init__(self, label_fn: str, schema, kind: str, seed: int = 0):
        from tensorflow_transform.tf_metadata import schema_utils

        self.name = label_fn
        self.fn = load_fn(label_fn)
        self.kind = kind
        self.spec = schema_utils.schema_as_feature_spec(schema).feature_spec
        self.sources: list[str] | None = None
        self.rows = self.missing = 0
        self.classes: collections.Counter = collections.Counter()
        self.values: list[np.ndarray] = []
        self.rng = np.random.default_rng(seed)
        # Why the label could not be computed on this span (then it is not counted further).
        self.error: str | None = None

    @property
    def source_spec(self) -> dict | None:
        """The feature spec of the label's sources (known after the first batch), or None."""
        if self.sources is None or self.error:
            return None
        return {k: self.spec[k] for k in self.sources}

    def add(self, records) -> None:
        """One batch of serialized examples (a list of bytes or a string tensor)."""
        import tensorflow as tf

        if not len(records) or self.error:
            return
        if self.sources is not None:
            try:
                parsed = tf.io.parse_example(records, self.source_spec)
            except tf.errors.InvalidArgumentError as e:  # a source of another type than the schema's
                self.error = f"the examples do not parse with the schema's feature spec: {e.message.splitlines()[0][:300]}"
                return
            self.add_parsed(parsed, len(records))
            return
        # The first batch: each feature on its own, so one of another type than the schema's
        # matters only if the label reads it (ExampleValidator reports it either way).
        parsed, unparsed = {}, {}
        for key, spec in self.spec.items():
            try:
                parsed.update(tf.io.parse_example(records, {key: spec}))
            except tf.errors.InvalidArgumentError as e:
                unparsed[key] = e.message.splitlines()[0][:300]
        inputs = _Recording(parsed, unparsed)
        try:
            label = self._call(inputs)
        except _Uncomputable as e:
            self.error = str(e)
            return
        self.sources = list(inputs.read)
        self._count(label, parsed, len(records))

    def add_parsed(self, parsed: Mapping, num_rows: int) -> None:
        """One batch already parsed with `source_spec`."""
        if self.error:
            return
        try:
            label = self._call(parsed)
        except _Uncomputable as e:
            self.error = str(e)
            return
        self._count(label, parsed, num_rows)

    def _count(self, label: np.ndarray, parsed: Mapping, num_rows: int) -> None:
        import tensorflow as tf

        has = np.ones(num_rows, bool)
        for source in self.sources:  # a row whose source has no value has a fill value, not a label
            value = parsed[source]
            if isinstance(value, tf.sparse.SparseTensor):
                rows = np.zeros(num_rows, bool)
                rows[value.indices.numpy()[:, 0]] = True
                has &= rows
        self.rows += num_rows
        self.missing += int((~has).sum())
        kept = label[has]
        if self.kind == CLASSES:
            distinct, n = np.unique(kept.astype(np.int64), return_counts=True)
            self.classes.update(dict(zip(distinct.tolist(), n.tolist())))
        else:
            self.values.append(kept.astype(np.float64))

    def _call(self, inputs) -> np.ndarray:
        try:
            out = self.fn(inputs)
        except _Unparsed as e:
            raise _Uncomputable(str(e)) from None
        except Exception as e:  # the user's function: its error, with its name
            raise LabelError(f"label_fn {self.name} failed on the span's examples: {type(e).__name__}: {e}") from e
        value = np.asarray(getattr(out, "numpy", lambda: out)())
        if value.ndim == 2 and value.shape[1] == 1:
            value = value[:, 0]
        if value.ndim != 1:
            raise LabelError(f"label_fn {self.name} returned shape {value.shape}; expected one label per row")
        return value

    def facts(self) -> dict:
        """What the checks and the next span's reference need (JSON-safe)."""
        out = {"rows": self.rows, "missing": self.missing, "labelled": self.rows - self.missing,
               "kind": self.kind, "sources": self.sources or []}
        if self.error:
            out["error"] = self.error
        if self.kind == CLASSES:
            out["classes"] = {str(c): n for c, n in sorted(self.classes.items())}
            return out
        values = np.concatenate(self.values) if self.values else np.array([])
        if len(values) > MAX_VALUES:
            values = self.rng.choice(values, MAX_VALUES, replace=False)
        finite = values[np.isfinite(values)]
        out.update({"count": int(len(finite)), "zeros": int(np.sum(finite == 0)),
                    "distinct": int(min(len(np.unique(finite)), 1000)),
                    "quantiles": [float(q) for q in np.quantile(finite, np.linspace(0, 1, QUANTILES))] if len(finite) else [],
                    "mean": float(finite.mean()) if len(finite) else None})
        return out


def _view(name: str, count: int, zeros: int, quantiles) -> measures.FeatureView:
    return measures.FeatureView(name, "numeric", count, float(count), tuple(quantiles), count, zeros)


def mixture_quantiles(parts: list[dict]) -> list[float]:
    """Quantiles of the pooled values of several spans, from each one's quantiles and count."""
    parts = [p for p in parts if p.get("quantiles") and p.get("count")]
    if not parts:
        return []
    grid = np.unique(np.concatenate([p["quantiles"] for p in parts]))
    levels = np.linspace(0, 1, QUANTILES)
    total = sum(p["count"] for p in parts)
    cdf = sum(p["count"] * np.interp(grid, p["quantiles"], levels) for p in parts) / total
    return [float(v) for v in np.interp(levels, cdf, grid)]


def pooled(reference: list[dict]) -> dict:
    """The reference spans' label facts as one."""
    out = {"spans": [r.get("span") for r in reference], "labelled": sum(r["labelled"] for r in reference)}
    if reference and reference[0]["kind"] == CLASSES:
        classes = collections.Counter()
        for r in reference:
            classes.update({c: n for c, n in r["classes"].items()})
        out["classes"] = dict(classes)
    else:
        out.update({"count": sum(r.get("count", 0) for r in reference), "zeros": sum(r.get("zeros", 0) for r in reference),
                    "quantiles": mixture_quantiles(reference)})
    return out


def class_deviation(facts: dict, ref: dict) -> dict | None:
    """The class whose share moved most from the reference, as a two-sample z."""
    n, m = facts["labelled"], ref["labelled"]
    if not n or not m:
        return None
    worst = None
    for c in sorted(set(facts["classes"]) | set(ref["classes"]), key=lambda c: (len(c), c)):
        a, b = facts["classes"].get(c, 0), ref["classes"].get(c, 0)
        p = (a + b) / (n + m)
        if p in (0.0, 1.0):
            continue
        z = abs(a / n - b / m) / math.sqrt(p * (1 - p) * (1 / n + 1 / m))
        if worst is None or z > worst["z"]:
            worst = {"class": c, "z": z, "share": a / n, "reference_share": b / m}
    return worst


def distribution_distances(facts: dict, ref: dict) -> dict:
    """KS distance and scale change vs the reference, each with the n_eff it is judged at."""
    if not facts.get("quantiles") or not ref.get("quantiles"):
        return {}
    cur = _view("label", facts["count"], facts["zeros"], facts["quantiles"])
    base = _view("label", ref["count"], ref["zeros"], ref["quantiles"])
    n_eff = facts["count"] * ref["count"] / (facts["count"] + ref["count"])
    out = {"n_eff": n_eff}
    for measure, value in (("ks", measures.ks_distance(cur, base)), ("scale", measures.log_scale_change(cur, base))):
        if value is not None:
            out[measure] = value
    return out


def learn(history: list[tuple[int, dict]], reference_spans: int, margin: float, name: str,
          alpha: float) -> tuple[dict, list[dict]]:
    """The label section of gate.yaml from each span's label facts (in span order).

    Each span is judged against the `reference_spans` spans before it, as the gate judges
    a new span against the reference its baseline report carries.

    Returns:
      (the `label:` entry, evidence rows per span).
    """
    kind = history[0][1]["kind"]
    evidence, observed = [], {}
    for i, (span, facts) in enumerate(history):
        before = [dict(f, span=s) for s, f in history[max(0, i - reference_spans):i]]
        row = {"span": span, "feature": name, "check": "label", "missing_share": _share(facts["missing"], facts["rows"])}
        if before:
            ref = pooled(before)
            values = {}
            if kind == CLASSES:
                worst = class_deviation(facts, ref)
                if worst:
                    values["classes"] = worst["z"]
            else:
                d = distribution_distances(facts, ref)
                values = {m: policy_lib.scaled(m, d[m], d["n_eff"]) for m in ("ks", "scale") if m in d}
            for measure, value in values.items():
                row[measure] = float(f"{value:.4g}")
                if measure not in observed or value > observed[measure]["max"]:
                    observed[measure] = {"max": float(f"{value:.4g}"), "at": span}
        evidence.append(row)
    floors = {"classes": NULL_Z, "ks": policy_lib.NULL_K_KS, "scale": 0.0}
    k = {m: float(f"{max(margin * o['max'], floors[m]):.4g}") for m, o in observed.items()}
    allowed, i = policy_lib.allowed_share([(f["missing"], f["rows"]) for _, f in history], margin, alpha)
    span, worst = history[i]
    entry = {
        "name": name, "kind": kind, "reference_spans": reference_spans, "k": k, "allowed_missing_share": allowed,
        "observed": {**observed, "missing": {"max_share": _share(worst["missing"], worst["rows"]),
                                             "count": worst["missing"], "of": worst["rows"], "at": span}},
    }
    return entry, evidence


def _share(a: int, b: int) -> float:
    return float(f"{a / b:.4g}") if b else 0.0


def judge(facts: dict, reference: list[dict], calibrated: Mapping | None, alpha: float, name: str,
          span: int) -> list[dict]:
    """The label's checks of a span (each a dict with `failed` and a `description`).

    Args:
      facts: this span's `Tally.facts()`.
      reference: the label facts of the spans that passed before it (may be empty).
      calibrated: gate.yaml's `label:` entry, or None (strict defaults).
      alpha: the level of the share and constancy tests.
      name: the label's name for messages (the config's label_key).
    """
    if facts.get("error"):
        return [{"feature": name, "check": "label_uncomputable", "failed": True,
                 "description": f"label {name} cannot be computed on span {span}: {facts['error']}"}]
    calibrated = calibrated or {}
    source = "calibrated" if calibrated else "default"
    k = {**DEFAULT_K, **(calibrated.get("k") or {})} if calibrated else dict(DEFAULT_K)
    sources = ", ".join(facts.get("sources") or [])
    checks = []
    allowed = float(calibrated.get("allowed_missing_share", 0.0))
    failed, p = policy_lib.share_exceeded(facts["missing"], facts["rows"], allowed, alpha)
    checks.append({
        "feature": name, "check": "label_missing", "count": facts["missing"], "rows": facts["rows"],
        "share": _share(facts["missing"], facts["rows"]), "allowed_share": allowed, "p_value": p, "failed": failed,
        "limit_source": source,
        "description": f"label {name}: {facts['missing']} of {facts['rows']} rows have no value in a column it is"
                       f" computed from ({sources}) {'exceeds' if failed else 'within'} the allowed share"
                       f" {allowed:.3%} (p = {p:.2g}, {source})",
    })
    labelled = facts["labelled"]
    ref = pooled(reference) if reference else None
    if facts["kind"] == CLASSES:
        classes = facts["classes"]
        if len(classes) == 1 and labelled >= 2:
            only = next(iter(classes))
            chance = 0.0
            if ref and ref["labelled"]:
                chance = sum((n / ref["labelled"]) ** labelled for n in ref["classes"].values())
            failed = chance < alpha
            checks.append({
                "feature": name, "check": "label_constant", "value": only, "rows": labelled, "p_value": chance,
                "failed": failed,
                "description": f"label {name}: constant ({only} in all {labelled} labelled rows)"
                               + (f"; the reference's class shares make that chance {chance:.2g}" if ref else "")
                               + (" (stops)" if failed else " (as likely as not for this few rows)"),
            })
        if ref:
            worst = class_deviation(facts, ref)
            if worst:
                limit = k["classes"]
                failed = worst["z"] > limit
                checks.append({
                    "feature": name, "check": "label_classes", "value": round(worst["z"], 3), "threshold": limit,
                    "class": worst["class"], "share": worst["share"], "reference_share": worst["reference_share"],
                    "limit_source": source, "failed": failed,
                    "description": f"label {name}: class {worst['class']} is {worst['share']:.1%} of {labelled} rows"
                                   f" vs {worst['reference_share']:.1%} of {ref['labelled']} in the reference (spans"
                                   f" {_span_list(ref['spans'])}): z {worst['z']:.2f}"
                                   f" {'exceeds' if failed else 'within'} the limit {limit:g} ({source})",
                })
        return checks
    if facts.get("distinct") == 1 and labelled >= 2:
        checks.append({"feature": name, "check": "label_constant", "value": facts["quantiles"][0], "rows": labelled,
                       "failed": True,
                       "description": f"label {name}: constant ({facts['quantiles'][0]:g} in all {labelled} labelled rows)"})
    if ref:
        d = distribution_distances(facts, ref)
        for measure in ("ks", "scale"):
            if measure not in d:
                continue
            limit = policy_lib.threshold(measure, k[measure], d["n_eff"])
            failed = d[measure] > limit
            checks.append({
                "feature": name, "check": f"label_{measure}", "value": round(d[measure], 6), "threshold": round(limit, 6),
                "k": k[measure], "n_eff": round(d["n_eff"], 1), "limit_source": source, "failed": failed,
                "description": f"label {name}: {policy_lib.MEASURE_NAMES[measure]} {d[measure]:.4g} vs the reference"
                               f" (spans {_span_list(ref['spans'])}) {'exceeds' if failed else 'within'} the limit"
                               f" {limit:.4g} (k {k[measure]:g} / n_eff {d['n_eff']:.0f}^0.5, {source})",
            })
    return checks


def _span_list(spans: list) -> str:
    spans = [s for s in spans if s is not None]
    return f"{spans[0]}..{spans[-1]}" if len(spans) > 1 else (str(spans[0]) if spans else "?")


def next_reference(facts: dict, reference: list[dict], span: int, reference_spans: int) -> list[dict]:
    """The reference the next span is judged against: this span's facts after the previous ones."""
    return [*reference, dict(facts, span=span)][-reference_spans:]
