"""The feature policy: per feature, how sensitive it is, whether a model may use it, and
what request logs keep of it.

A reviewed file beside the curated schema and the gate policy
(`schemas/<pipeline>/feature_policy.yaml`, the config's `feature_policy:`), one entry per
feature of the schema:

    features:
      company:
        pii: none              # none | pseudonymous | personal | special
        use_in_model: allowed  # allowed | forbidden
        log: keep              # keep | hash | drop
        ingest: keep           # keep | drop
        reason: ""             # why; required where use_in_model is forbidden

- `pii`: the sensitivity class. `pseudonymous`: an identifier that names no one by itself
  (a device, account or taxi id); `personal`: data about a person (a name, an e-mail, a
  phone number, an exact address); `special`: special categories (health, ethnicity,
  religion, ...). Every class but `none` is sensitive: reports and the Models view never
  print its raw values, and it may not be logged as it is (`log: keep`).
- `use_in_model: forbidden`: the pipeline's code may not read it; a config whose
  preprocessing or model code names it is refused when it loads (exit 2), naming the
  feature and the file and line (pipelines/config/validation.py).
- `log`: what the server's request log writes (serving/server/request_log.py): the value
  (`keep`), a keyed hash of it (`hash`: HMAC-SHA256 under the key in RETRAIN_LOG_HASH_KEY,
  a secret that is never in the repository), or nothing (`drop`: the feature never
  reaches disk).
- `ingest: drop` (for a feature no model may use): the pipeline never stores it. ExampleGen
  leaves the column out of the examples (both engines), and the run's imported schema and
  gate policy leave the feature out, so no examples, statistics, anomalies or reports in
  the workdir hold its values. The curated schema and this file still name it: the raw
  data have it, and requests may carry it (the request log applies `log`).

TensorFlow-free: read by config validation, the server and the reports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from core import files
from core.settings import Settings, SettingsError

PII_CLASSES = ("none", "pseudonymous", "personal", "special")
# The environment variable holding the key of `log: hash` (a secret: never in the repo).
HASH_KEY_ENV = "RETRAIN_LOG_HASH_KEY"
# What a hashed value is written as: the prefix says it is no raw value.
HASH_PREFIX = "hmac-sha256:"


class PolicyError(ValueError):
    """A feature policy that cannot be used; the message names the file and the feature."""


@dataclasses.dataclass(frozen=True)
class FeatureRule(Settings):
    """One feature's entry of the policy."""

    pii: Literal["none", "pseudonymous", "personal", "special"]
    use_in_model: Literal["allowed", "forbidden"]
    log: Literal["keep", "hash", "drop"]
    ingest: Literal["keep", "drop"] = "keep"
    reason: str = ""

    @property
    def sensitive(self) -> bool:
        return self.pii != "none"

    def check(self) -> None:
        if self.use_in_model == "forbidden" and not self.reason.strip():
            raise SettingsError("reason: required where use_in_model is forbidden (say why)")
        if self.ingest == "drop" and self.use_in_model != "forbidden":
            raise SettingsError("ingest: drop is for a feature forbidden in the model (a model cannot use what"
                                " is never stored): set use_in_model: forbidden with a reason, or ingest: keep")
        if self.sensitive and self.log == "keep":
            raise SettingsError(f"log: a {self.pii} feature is not logged as it is: hash or drop it")


@dataclasses.dataclass(frozen=True)
class FeaturePolicy:
    """The whole policy: feature -> rule, and the file it came from."""

    rules: Mapping[str, FeatureRule] = dataclasses.field(default_factory=dict)
    path: str | None = None

    @property
    def forbidden(self) -> dict[str, str]:
        """Features no model may use, with the reason."""
        return {f: r.reason for f, r in self.rules.items() if r.use_in_model == "forbidden"}

    @property
    def not_ingested(self) -> list[str]:
        """Features the pipeline never stores (`ingest: drop`), sorted."""
        return sorted(f for f, r in self.rules.items() if r.ingest == "drop")

    @property
    def sensitive(self) -> list[str]:
        """Features whose raw values no report prints."""
        return sorted(f for f, r in self.rules.items() if r.sensitive)

    def log_action(self, feature: str) -> str:
        """keep, hash or drop; a feature the policy does not name (no policy at all, or one
        the request carries beyond the schema) is dropped where a policy exists."""
        rule = self.rules.get(feature)
        if rule is not None:
            return rule.log
        return "drop" if self.rules else "keep"

    @property
    def needs_hash_key(self) -> bool:
        return any(r.log == "hash" for r in self.rules.values())

    def summary(self) -> dict[str, Any]:
        """What a report shows: the counts and the feature lists per decision."""
        return {
            "path": self.path,
            "features": len(self.rules),
            "forbidden": self.forbidden,
            "sensitive": {f: self.rules[f].pii for f in self.sensitive},
            "logged_hashed": sorted(f for f, r in self.rules.items() if r.log == "hash"),
            "not_logged": sorted(f for f, r in self.rules.items() if r.log == "drop"),
            "not_ingested": self.not_ingested,
        }


# The policy's copy inside each SavedModel (beside the runtime's SBOM): the served version
# carries the rules its request logs follow, and reports show what the model was trained under.
MODEL_COPY = os.path.join("assets.extra", "feature_policy.json")


def to_dict(policy: FeaturePolicy) -> dict[str, Any]:
    """Plain values (JSON): the source file, its digest and every rule."""
    digest = None
    if policy.path and os.path.exists(policy.path):
        with open(policy.path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    return {"source": policy.path, "sha256": digest,
            "features": {name: rule.to_dict() for name, rule in sorted(policy.rules.items())}}


def from_model(serving_model_dir: str) -> FeaturePolicy | None:
    """The policy a SavedModel carries (MODEL_COPY), or None where it carries none.

    Raises:
      PolicyError: the copy is unreadable or invalid.
    """
    import json

    path = os.path.join(serving_model_dir, MODEL_COPY)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError) as e:
        raise PolicyError(f"{path}: cannot read the model's feature policy: {e}") from e
    if not isinstance(values, dict):
        raise PolicyError(f"{path}: the model's feature policy is not a JSON object")
    policy = parse({"features": values.get("features") or {}}, path)
    return dataclasses.replace(policy, path=values.get("source") or path)


def parse(values: Any, path: str = "feature policy") -> FeaturePolicy:
    """The policy from its YAML mapping.

    Raises:
      PolicyError: naming the file and the feature.
    """
    if not isinstance(values, Mapping) or set(values) - {"features"}:
        raise PolicyError(f"{path}: expected a mapping with one key, features (feature -> pii, use_in_model, log,"
                          f" reason)")
    features = values.get("features") or {}
    if not isinstance(features, Mapping):
        raise PolicyError(f"{path}: features: expected a mapping of feature -> its rule")
    rules = {}
    for name, rule in features.items():
        try:
            rules[str(name)] = FeatureRule.from_dict(rule, f"features.{name}")
        except SettingsError as e:
            raise PolicyError(f"{path}: {e}") from None
    return FeaturePolicy(rules, path)


def load(path: str) -> FeaturePolicy:
    """Reads a policy file.

    Raises:
      PolicyError: unreadable, not YAML, or an invalid entry.
    """
    return parse(files.read_yaml(path, PolicyError, "feature policy"), path)


def check_features(policy: FeaturePolicy, schema_features: Iterable[str], label: str | None = None) -> None:
    """One entry per feature of the schema, none beyond it; the label may not be forbidden.

    Raises:
      PolicyError: naming the missing or unknown features.
    """
    schema = list(schema_features)
    missing = [f for f in schema if f not in policy.rules]
    unknown = sorted(set(policy.rules) - set(schema))
    where = policy.path or "feature policy"
    if missing:
        raise PolicyError(f"{where}: no entry for feature(s) {', '.join(missing)} of the schema"
                          " (every feature needs pii, use_in_model and log)")
    if unknown:
        raise PolicyError(f"{where}: feature(s) {', '.join(unknown)} are not in the schema")
    if label and label in policy.forbidden:
        raise PolicyError(f"{where}: the label {label!r} cannot be forbidden in the model")


def hash_key() -> bytes:
    """The key of `log: hash`, from the environment.

    Raises:
      PolicyError: RETRAIN_LOG_HASH_KEY unset or shorter than 16 characters.
    """
    key = os.environ.get(HASH_KEY_ENV, "")
    if len(key) < 16:
        raise PolicyError(f"{HASH_KEY_ENV} must hold a secret of at least 16 characters: the feature policy hashes"
                          " features in request logs (log: hash), and the key may not come from the repository")
    return key.encode()


def keyed_hash(value: Any, key: bytes) -> str:
    """HMAC-SHA256 of a value (bytes as they are, a string's UTF-8, anything else's repr),
    hex, with HASH_PREFIX: equal values hash equal (so counts and joins still work), and
    without the key no one can test a guess. The request log writes the same."""
    data = value if isinstance(value, bytes) else (value if isinstance(value, str) else repr(value)).encode(
        "utf-8", "surrogatepass")
    return HASH_PREFIX + hmac.new(key, data, hashlib.sha256).hexdigest()
