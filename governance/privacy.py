"""The privacy scan behind the scorecard's "the data pipeline has appropriate privacy
controls" (Data 5): proof, not configuration, that the values the feature policy declares
sensitive are not where they must not be.

The feature policy (core/feature_policy.py) declares the sensitive features (pii other than
none) and what request logs keep of each (drop or a keyed hash). The scan:

1. plants a value in each sensitive feature of a classify request and of a predict
   request, puts both through the request log's own policy step
   (serving/server/request_log.py `apply_policy`) and looks for the planted values in what
   would reach disk: a dropped feature must be gone, a hashed one carry only
   `hmac-sha256:` values, and the planted bytes and numbers appear nowhere;
2. reads the raw values of the sensitive features from the pipeline's spans (the declared
   values: the newest `window_spans` spans, CSV);
3. decodes every request log file on disk (PredictionLog TFRecords) and checks each logged
   example as in 1, and that no declared value appears in any logged feature;
4. searches the human-facing records for the declared values as text: governance reports
   and model cards, the run logs (`<workdir>/logs/`), the alerts;
5. for a feature the pipeline never stores (`ingest: drop`), looks for its name in the
   newest examples and statistics artifacts;
6. finds request log files older than the retention period (`retention.max_age_days`).

A finding of any step fails the scan. Every input is listed with its SHA-256 so an auditor
can re-run the same scan on the same files. Examples and statistics of a feature the policy
lets the pipeline store (`ingest: keep`) hold its values by design and are not searched.
A declared value shorter than `MIN_VALUE_CHARS` is counted, not searched (it would match
unrelated text).

Step 1 and 3 need TensorFlow (the logs are TF protos); the rest is plain Python.
"""

from __future__ import annotations

import csv
import datetime as dt
import glob
import gzip
import hashlib
import os
import re
from typing import Any

from core import layout, nodes
from core.files import sha256_file

MIN_VALUE_CHARS = 4
MAX_FINDINGS = 20
# What a planted value looks like: unique per scan, never a real value.
PLANT_PREFIX = "planted-sensitive-"
_TOKEN = re.compile(r"[0-9A-Za-z@_+\-]+")



def digest_of(files: list[dict]) -> str:
    """One SHA-256 over a list of {path, sha256}: what `sha256sum` of each, sorted by path,
    joined as "sha256  path" lines, hashes to."""
    lines = "".join(f"{f['sha256']}  {f['path']}\n" for f in sorted(files, key=lambda f: f["path"]))
    return hashlib.sha256(lines.encode()).hexdigest()


def _normal(value: str) -> str:
    """A CSV cell as it would print: `17031081500.0` and `17031081500` are the same value."""
    value = value.strip()
    try:
        number = float(value)
    except ValueError:
        return value
    return str(int(number)) if number.is_integer() and abs(number) < 1e18 else value


def declared_values(span_files: list[str], features: list[str], max_rows: int = 500_000) -> dict[str, set[str]]:
    """The raw values of `features` in the CSV or Parquet span files (at most `max_rows` rows read)."""
    out: dict[str, set[str]] = {f: set() for f in features}
    rows = 0
    for path in span_files:
        if path.endswith(".parquet"):
            rows += _parquet_declared_values(path, out, max_rows - rows)
            if rows >= max_rows:
                return out
            continue
        with open(path, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                for feature in features:
                    value = (row.get(feature) or "").strip()
                    if value:
                        out[feature].add(_normal(value))
                rows += 1
                if rows >= max_rows:
                    return out
    return out


def _parquet_declared_values(path: str, out: dict[str, set[str]], max_rows: int) -> int:
    """Adds the values of the declared columns of a Parquet span file (its first `max_rows`
    rows, as text) to `out`; returns the rows read."""
    import pyarrow.parquet as pq

    from core import parquet_columns

    found = parquet_columns.file_columns(path)
    wanted = [c.name for c in found.columns if c.name in out and c.kind is not None and c.problem is None]
    if not wanted or max_rows <= 0:
        return min(found.num_rows, max(max_rows, 0))
    table = pq.read_table(path, columns=wanted).slice(0, max_rows)
    for column in wanted:
        for values in parquet_columns.row_values(table.column(column), found.column(column), path):
            for value in values:
                text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                if text.strip():
                    out[column].add(_normal(text))
    return table.num_rows


class Needles:
    """Declared values to look for in text: one-token values by token, others as phrases."""

    def __init__(self, values: dict[str, set[str]]):
        self.owner: dict[str, str] = {}
        self.phrases: dict[str, str] = {}
        self.too_short = 0
        for feature, found in values.items():
            for v in found:
                if len(v) < MIN_VALUE_CHARS:
                    self.too_short += 1
                elif _TOKEN.fullmatch(v):
                    self.owner[v] = feature
                else:
                    self.phrases[v] = feature

    def __len__(self) -> int:
        return len(self.owner) + len(self.phrases)

    def find(self, text: str) -> list[tuple[str, str]]:
        """(feature, value) of each declared value in `text`."""
        hits = [(self.owner[t], t) for t in set(_TOKEN.findall(text)) if t in self.owner]
        hits += [(f, v) for v, f in self.phrases.items() if v in text]
        return sorted(hits)

    def holds(self, value: Any) -> str | None:
        """The feature whose declared value `value` is (a logged feature's value), else None."""
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        text = _normal(text)
        return self.owner.get(text) or self.phrases.get(text)


def _check_example(example, policy, needles: Needles | None, where: str, planted: set | None = None) -> list[str]:
    """What a logged tf.Example holds that the policy keeps off disk."""
    from core import feature_policy as policy_lib

    out = []
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value) if kind else []
        rule = policy.rules.get(name)
        if rule is not None and rule.sensitive:
            if rule.log == "drop":
                out.append(f"{where}: {name} ({rule.pii}, log: drop) is in the log")
                continue
            if rule.log == "hash" and (kind != "bytes_list" or not all(
                    v.startswith(policy_lib.HASH_PREFIX.encode()) for v in values)):
                out.append(f"{where}: {name} ({rule.pii}, log: hash) is logged unhashed")
                continue
        for v in values:
            owner = needles.holds(v) if needles is not None else None
            if owner is not None:
                out.append(f"{where}: a value of sensitive feature {owner} is logged (under {name})")
                break
            if planted and (v in planted or (isinstance(v, bytes) and v.decode("utf-8", "replace") in planted)):
                out.append(f"{where}: the planted value of {name} reached the log")
                break
    return out


def planted_probe(policy) -> dict:
    """Step 1: planted values through the request log's policy step (TensorFlow)."""
    import tensorflow as tf
    from tensorflow_serving.apis import classification_pb2, predict_pb2

    from serving.server import request_log

    sensitive = [f for f, r in sorted(policy.rules.items()) if r.sensitive]
    token = os.urandom(6).hex()
    text = {f: f"{PLANT_PREFIX}{f}-{token}" for f in sensitive}
    numbers = {f: 7_300_000_000_000 + i * 7919 + int(token[:4], 16) for i, f in enumerate(sensitive)}
    planted: set = set(text.values()) | {v.encode() for v in text.values()} | set(numbers.values())
    classify = classification_pb2.ClassificationRequest()
    for values in (text, numbers):
        example = classify.input.example_list.examples.add()
        for f, v in values.items():
            if isinstance(v, str):
                example.features.feature[f].bytes_list.value.append(v.encode())
            else:
                example.features.feature[f].int64_list.value.append(v)
    predict = predict_pb2.PredictRequest()
    for f, v in text.items():
        predict.inputs[f].CopyFrom(tf.make_tensor_proto([v]))
    findings = []
    for kind, log in (("classify", request_log.classify_log(classify, classification_pb2.ClassificationResponse())),
                      ("predict", request_log.predict_log(predict, predict_pb2.PredictResponse()))):
        request_log.apply_policy(log, policy, b"scorecard-privacy-probe-key")
        raw = log.SerializeToString()
        findings += [f"planted {kind} request: the planted value of {f} is in the serialized log"
                     for f, v in text.items() if v.encode() in raw]
        for i, serialized in enumerate(request_log.logged_examples(log)):
            findings += _check_example(tf.train.Example.FromString(serialized), policy, None,
                                       f"planted {kind} request, example {i}", planted)
    return {"features": sensitive, "requests": 2, "findings": findings}


def scan_request_logs(files: list[str], policy, needles: Needles) -> dict:
    """Step 3: every logged example of every request log file (TensorFlow)."""
    import tensorflow as tf

    from serving.server import request_log

    findings, listed, logs = [], [], 0
    for path in files:
        count = 0
        try:
            for log in request_log.read_file(path):
                count += 1
                for serialized in request_log.logged_examples(log):
                    findings += _check_example(tf.train.Example.FromString(serialized), policy, needles,
                                               f"{os.path.basename(path)} log {count}")
        except Exception as e:  # noqa: BLE001  (TF's DataLossError, protobuf's DecodeError): unproven
            findings.append(f"{path}: unreadable after {count} logs, so not proven clean ({type(e).__name__}: {e})")
        logs += count
        listed.append({"path": path, "sha256": sha256_file(path), "logs": count})
    return {"files": listed, "logs": logs, "findings": findings}


def scan_texts(paths: list[str], needles: Needles) -> dict:
    """Step 4: the declared values as text in reports, run logs and alerts."""
    listed, findings = [], []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        listed.append({"path": path, "sha256": hashlib.sha256(data).hexdigest()})
        for feature, value in needles.find(data.decode("utf-8", "replace")):
            findings.append(f"{path}: a raw value of sensitive feature {feature} ({value[:2]}...)")
    return {"files": len(listed), "sha256": digest_of(listed), "listed": listed, "findings": findings}


def scan_not_ingested(names: list[str], paths: list[str]) -> dict:
    """Step 5: the name of a feature the pipeline never stores, in its newest artifacts."""
    listed, findings = [], []
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        try:
            with opener(path, "rb") as f:
                data = f.read()
        except (OSError, EOFError) as e:
            findings.append(f"{path}: unreadable, not scanned ({e})")
            continue
        listed.append({"path": path, "sha256": sha256_file(path)})
        findings += [f"{path}: holds feature {n} (ingest: drop)" for n in names if n.encode() in data]
    return {"features": names, "files": len(listed), "sha256": digest_of(listed), "findings": findings}


def stale_logs(files: list[str], max_age_days: float | None, now: dt.datetime) -> dict:
    """Step 6: request log files older than the retention period."""
    if max_age_days is None:
        return {"max_age_days": None, "findings": []}
    limit = now.timestamp() - max_age_days * 86400
    old = [p for p in files if os.path.getmtime(p) < limit]
    return {"max_age_days": max_age_days,
            "findings": [f"{p}: older than the retention period ({max_age_days:g} days)" for p in old]}


def _request_log_files(config) -> list[str]:
    """The model's request log files: under the default prefix, and the prefix models.config
    names for it where it names one."""
    from serving.repository import model_config, versions

    prefixes = {layout.request_log_prefix(config.workdir, config.model_name)}
    serving_root = layout.serving_root(config.workdir)
    path = versions.config_path(serving_root)
    if os.path.exists(path):
        entry = model_config.find(model_config.load(path), config.model_name)
        if entry is not None and entry.HasField("logging_config"):
            prefixes.add(entry.logging_config.log_collector_config.filename_prefix)
    from serving.server import request_log  # TensorFlow

    return sorted({p for prefix in prefixes for p in request_log.log_files(prefix)})


def _text_roots(config) -> list[str]:
    """Where the human-facing records are: reports and model cards, run logs, alerts."""
    return [os.path.join(config.pipeline_root, layout.REPORT_DIR), os.path.join(config.workdir, "logs"),
            layout.alerts_path(config.workdir, config.pipeline_name)]


def _text_files(config) -> list[str]:
    reports, logs, alerts = _text_roots(config)
    paths = [p for p in glob.glob(os.path.join(reports, "**", "*"), recursive=True)
             if os.path.isfile(p) and p.endswith((".json", ".html", ".md", ".txt", ".jsonl"))]
    paths += glob.glob(os.path.join(logs, f"{config.pipeline_name}-*.log"))
    if os.path.isfile(alerts):
        paths.append(alerts)
    return sorted(paths)


def _newest_artifact_files(config, parts: tuple[str, ...]) -> list[str]:
    """The files of the newest artifact folder under <pipeline_root>/<node>/<key>/<id>/."""
    folders = [d for d in glob.glob(os.path.join(config.pipeline_root, *parts, "*")) if os.path.isdir(d)]
    if not folders:
        return []
    newest = max(folders, key=os.path.getmtime)
    return sorted(p for p in glob.glob(os.path.join(newest, "**", "*"), recursive=True) if os.path.isfile(p))


def scan(config, now: dt.datetime | None = None) -> dict:
    """The whole scan (steps 1-6) for a pipeline config.

    Returns:
      {"ran": False, "reason"} where nothing is declared sensitive; else {"ran": True,
      "passed", "findings" (the first MAX_FINDINGS), "policy", "policy_sha256", "sensitive",
      "declared", "planted", "request_logs", "texts", "not_ingested", "retention"}.
    """
    from core import feature_policy as policy_lib
    from core import spans as spans_lib

    now = now or dt.datetime.now(dt.timezone.utc)
    if config.feature_policy is None:
        return {"ran": False, "reason": "the config names no feature_policy: nothing is declared sensitive"}
    policy = policy_lib.load(config.feature_policy)
    sensitive = {f: r.pii for f, r in sorted(policy.rules.items()) if r.sensitive}
    if not sensitive:
        return {"ran": False, "reason": f"{config.feature_policy} declares no feature sensitive (pii: none for all)"}
    span_files: list[str] = []
    spans_note = None
    if config.example_format in ("csv", "parquet"):
        try:
            newest = spans_lib.list_spans(config.data_root)[-config.window_spans:]
        except spans_lib.SpanError as e:
            newest, spans_note = [], str(e)
        suffix = spans_lib.FILE_SUFFIXES[config.example_format]
        for span in newest:
            span_files += sorted(glob.glob(os.path.join(spans_lib.span_dir(config.data_root, span), "*" + suffix)))
    else:
        spans_note = f"spans are {config.example_format}: no declared values read from them"
    values = declared_values(span_files, list(sensitive))
    needles = Needles(values)
    log_files = _request_log_files(config)
    planted = planted_probe(policy)
    logs = scan_request_logs(log_files, policy, needles)
    texts = scan_texts(_text_files(config), needles)
    not_ingested = policy.not_ingested
    artifacts = []
    if not_ingested:
        # Each ExampleGen's newest examples (a pipeline has one: CSV, Parquet or TFRecord).
        for parts in (*((gen, "examples") for gen in nodes.EXAMPLE_GENS), (nodes.STATISTICS_GEN, "statistics")):
            artifacts += _newest_artifact_files(config, parts)
    dropped = scan_not_ingested(not_ingested, artifacts)
    retention = stale_logs(log_files, config.retention_settings.max_age_days, now)
    findings = planted["findings"] + logs["findings"] + texts["findings"] + dropped["findings"] + retention["findings"]
    return {
        "ran": True, "passed": not findings, "findings": findings[:MAX_FINDINGS], "finding_count": len(findings),
        "scanned_at": now.isoformat(timespec="seconds"),
        "policy": config.feature_policy, "policy_sha256": sha256_file(config.feature_policy), "sensitive": sensitive,
        "declared": {"spans": [{"path": p, "sha256": sha256_file(p)} for p in span_files], "note": spans_note,
                     "values": {f: len(v) for f, v in values.items()}, "searched": len(needles),
                     "too_short_to_search": needles.too_short},
        "planted": planted, "request_logs": {**logs, "findings": logs["findings"][:MAX_FINDINGS]},
        "texts": {k: v for k, v in texts.items() if k != "listed"} | {"findings": texts["findings"][:MAX_FINDINGS],
                                                                       "roots": _text_roots(config)},
        "not_ingested": dropped, "retention": retention,
    }
