"""Evaluator executor: TFX's, then the significance verdict decides the blessing.

TFX's executor runs TFMA (metrics with confidence intervals, candidate and baseline on
the same eval examples) and blesses on TFMA's point-estimate validation. This executor
then rewrites the blessing from `significance.judge`: TFMA's floors still refuse, a drop
vs the baseline refuses only when significant, and a too small eval split is not judged.
The verdict is written to `<evaluation>/significance.json` and onto the blessing.

A large eval split (more than `max_examples` examples) is evaluated on a seeded sample of
about that many (`sample_examples`): TFMA passes every example through Beam's coders
(about 1,000 examples/s here), which made it most of a run on a month of millions of
rows. The sample keeps each example whose keyed hash (SipHash, key SAMPLE_SEED) falls
below the rate, so it is the same examples for the candidate and the baseline and in every
run over the same data; its size is in the verdict, and the confidence intervals TFMA
computes on it are the ones judged.

Every eval example is also tagged with its span (`new_span.SPAN_FEATURE`, appended to its
bytes as it is copied), so TFMA reports both models on each span of the window in the same
pass, and `new_span.judge` refuses a candidate when the baseline's quality collapses on the
new span: evidence of bad data, said so in the reason.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

from tfx.components.evaluator import constants
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

from components.evaluator import fairness, new_span, significance, simple_baseline, staleness

logger = logging.getLogger(__name__)


# The sample's hash key: fixed, so the sample of the same data is the same in every run.
SAMPLE_SEED = 20240101
_HASH_BUCKETS = 1 << 30


def _split_files(artifact, split: str) -> list[str]:
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([artifact], split), "*")))


def _dataset(files: list[str]):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"), cycle_length=max(1, min(len(files), 4)),
        num_parallel_calls=tf.data.AUTOTUNE)


def count_examples(artifacts: list, splits: list[str]) -> int:
    """Records in the splits of the Examples artifacts (read in TensorFlow's C++ reader)."""

    total = 0
    for artifact in artifacts:
        for split in splits:
            files = _split_files(artifact, split)
            if files:
                total += _count(_dataset(files))
    return total


def _count(ds) -> int:
    """Records of a dataset, counted a batch at a time (a function per record costs ~40 us)."""
    import tensorflow as tf

    return int(ds.batch(8192).reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.size(b, out_type=tf.int64)))


def sample_examples(artifacts: list, splits: list[str], rate: float | None, out_dir: str) -> tuple[list, int]:
    """Copies of the Examples artifacts whose splits hold the seeded sample (every example
    when `rate` is None), each example tagged with its artifact's span; and their count.

    The sample is decided on the untagged bytes, so it is the one earlier runs drew.
    """
    import tensorflow as tf
    from tfx.types import standard_artifacts

    threshold = int((rate or 1.0) * _HASH_BUCKETS)
    copies, kept = [], 0
    for i, artifact in enumerate(artifacts):
        copy = standard_artifacts.Examples()
        copy.mlmd_artifact.CopyFrom(artifact.mlmd_artifact)
        copy.uri = os.path.join(out_dir, str(i))
        tag = tf.constant(new_span.tag_bytes(artifact.get_int_custom_property("span")))
        for split in splits:
            files = _split_files(artifact, split)
            target = artifact_utils.get_split_uri([copy], split)
            tf.io.gfile.makedirs(target)
            # A batch at a time: the keyed hash, the mask and the tag run once per 8,192 records.
            batches = _dataset(files).batch(8192) if files else tf.data.Dataset.from_tensors(tf.constant([], tf.string))
            if rate is not None:
                batches = batches.map(lambda b: tf.boolean_mask(
                    b, tf.strings.to_hash_bucket_strong(b, _HASH_BUCKETS, [SAMPLE_SEED, SAMPLE_SEED]) < threshold))
            sample = batches.map(lambda b: tf.strings.join([b, tf.fill(tf.shape(b), tag)])).unbatch()
            path = os.path.join(target, "sample.gz")
            tf.data.experimental.TFRecordWriter(path, compression_type="GZIP").write(sample)
            kept += _count(tf.data.TFRecordDataset(path, compression_type="GZIP"))
        copies.append(copy)
    return copies, kept


def count_values(artifacts: list, splits: list[str], features: list[str]) -> tuple[dict, dict]:
    """(feature -> value (as TFMA's slice keys spell it: text, or a number's digits) -> the
    eval examples holding it, feature -> the kinds of list it came in), over the splits of
    the (sampled) Examples artifacts."""
    from tensorflow.core.example import example_pb2

    counts: dict[str, dict[str, int]] = {f: {} for f in features}
    kinds: dict[str, set] = {f: set() for f in features}
    for artifact in artifacts:
        for split in splits:
            files = _split_files(artifact, split)
            if not files:
                continue
            for record in _dataset(files).batch(8192).as_numpy_iterator():
                for serialized in record:
                    example = example_pb2.Example.FromString(serialized)
                    for f in features:
                        feature = example.features.feature.get(f)
                        kind = feature.WhichOneof("kind") if feature is not None else None
                        if kind:
                            kinds[f].add(kind)
                        for v in (getattr(feature, kind).value if kind else ()):
                            key = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                            counts[f][key] = counts[f].get(key, 0) + 1
    return counts, kinds


def _numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class Executor(evaluator_executor.Executor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        settings = json.loads(exec_properties.get("significance") or "{}")
        limit = int(settings.get("max_examples") or 0)
        splits = json.loads(exec_properties.get(standard_component_specs.EXAMPLE_SPLITS_KEY) or "null") or ["eval"]
        sample = None
        sample_dir = os.path.join(self._get_tmp_dir(), "eval-sample")
        try:
            examples = input_dict[standard_component_specs.EXAMPLES_KEY]
            rate = None
            if limit:
                available = count_examples(examples, splits)
                if available > limit:
                    rate = limit / available
            # Tagged with their spans (and sampled above max_eval_examples).
            copies, kept = sample_examples(examples, splits, rate, sample_dir)
            if rate is not None:
                sample = {"eval_examples_available": available, "eval_examples_sampled": kept,
                          "max_eval_examples": limit, "seed": SAMPLE_SEED}
                logger.info("Evaluating a seeded sample of %d of %d eval examples (max_eval_examples %d)",
                            kept, available, limit)
            input_dict = {**input_dict, standard_component_specs.EXAMPLES_KEY: copies}
            exec_properties, small_groups = self._group_slicing(copies, splits, settings, exec_properties)
            super().Do(input_dict, output_dict, exec_properties)
            simple = self._score_simple(input_dict, copies, splits, settings, exec_properties)
        finally:
            shutil.rmtree(sample_dir, ignore_errors=True)
        newest = max((a.get_int_custom_property("span") for a in examples), default=None)
        baseline = (input_dict.get(standard_component_specs.BASELINE_MODEL_KEY) or [None])[0]
        candidate = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        self._judge(output_dict, settings, sample, newest, simple, baseline, candidate, small_groups)

    @staticmethod
    def _score_simple(input_dict: dict[str, list], copies: list, splits: list[str], settings: dict,
                      exec_properties: dict[str, Any]) -> dict | None:
        """The candidate and the simple baseline the Trainer exported beside it, scored
        paired on the eval examples TFMA judged (simple_baseline.score), when it is to be
        scored (`simple_baseline.enabled`, a key metric); else None."""
        from tensorflow.python.framework import errors as tf_errors
        from tensorflow_model_analysis.proto import config_pb2
        from tfx.utils import path_utils, proto_utils

        from trainer_toolkit.simple_baseline import SIMPLE_DIR

        if not (settings.get("simple_baseline") or {}).get("enabled", True) or not settings.get("key_metric"):
            return None
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        path = os.path.join(model.uri, SIMPLE_DIR)
        if not os.path.exists(os.path.join(path, "saved_model.pb")):
            logger.info("No simple baseline beside the candidate (%s): not compared", path)
            return None
        config = config_pb2.EvalConfig()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.EVAL_CONFIG_KEY], config)
        label_key = next(s.label_key for s in config.model_specs if not s.is_baseline)
        serving = path_utils.serving_model_path(model.uri, path_utils.is_old_model_artifact(model))
        files = [f for copy in copies for split in splits for f in _split_files(copy, split)]
        try:
            scores = simple_baseline.score(serving, path, files, label_key, settings["key_metric"])
        except (ValueError, KeyError, OSError, tf_errors.OpError) as e:
            # TFMA judged the candidate; a simple model that cannot be scored is said so.
            logger.warning("Simple baseline not scored: %s", e)
            return {"entries": [], "examples": None, "reason": f"the simple model could not be scored ({e})"}
        logger.info("Simple baseline scored beside the candidate on %d eval examples in %s s", scores["examples"],
                    scores.get("seconds"))
        return scores

    @staticmethod
    def _simple_verdict(scores: dict | None, settings: dict) -> dict:
        """The candidate against the simple baseline (simple_baseline.judge), the opt-out
        with its reason, or why there was nothing to compare."""
        from trainer_toolkit.settings import SimpleBaselineSettings

        config = SimpleBaselineSettings.from_dict(settings.get("simple_baseline") or {}, "simple_baseline")
        if not config.enabled:
            return {"judged": False, "opted_out": True, "reason": f"opted out: {config.reason}"}
        if scores is None or not settings.get("key_metric"):
            return {"judged": False, "reason": "no simple baseline beside the candidate (its run_fn passes no head"
                                               " to the trainer toolkit): not compared"}
        if not scores["entries"]:
            return {"judged": False, "examples": scores.get("examples"), "reason": f"{scores['reason']}: not compared"}
        level = config.significance_level or settings.get("level", 0.05)
        check = simple_baseline.judge(scores["entries"], settings["key_metric"], level, config)
        check["examples"] = scores["examples"]
        logger.info("Simple baseline: %s", check["reason"])
        return check

    @staticmethod
    def _runtime_changes(candidate, baseline) -> dict:
        """The packages that changed between the baseline's runtime and the candidate's
        (core/sbom.py; each model carries its runtime's SBOM). Not a blessing condition:
        the run summary alerts when a blessed candidate brings changes."""
        from tfx.utils import path_utils

        from core import sbom

        base_dir = versions = None
        if baseline is not None:
            base_dir = path_utils.serving_model_path(baseline.uri, path_utils.is_old_model_artifact(baseline))
            versions = (baseline.get_string_custom_property("runtime_versions")
                        if baseline.has_custom_property("runtime_versions") else None)
        cand_dir = path_utils.serving_model_path(candidate.uri, path_utils.is_old_model_artifact(candidate))
        out = sbom.compare_models(cand_dir, base_dir, versions)
        if baseline is not None:
            out["baseline_model_id"] = baseline.id
        return out

    @staticmethod
    def _group_slicing(copies: list, splits: list[str], settings: dict, exec_properties: dict) -> tuple[dict, dict]:
        """The fairness groups' slicing: each group feature's values are counted in the eval
        examples, and TFMA slices only the groups with at least `min_slice_examples` (a
        `feature_values` spec each) instead of every value (each slice costs every metric and
        its interval, for every model); the others are returned to be reported as too small.
        Returns (exec_properties with the rewritten eval config, {feature: small groups})."""
        from tensorflow_model_analysis.proto import config_pb2
        from tfx.utils import proto_utils

        groups = settings.get("fairness_groups") or []
        fair = fairness.FairnessSettings.from_dict(settings.get("fairness"), "fairness")
        if not groups or not fair.active:
            return exec_properties, {}
        counts, kinds = count_values(copies, splits, groups)
        # TFMA reads a value spec's digits as a number, which no string feature's value
        # matches: such a feature keeps its slicing by every value.
        groups = [g for g in groups if not ("bytes_list" in kinds[g] and any(_numeric(v) for v in counts[g]))]
        counts = {g: counts[g] for g in groups}
        big, small = fairness.split_groups(counts, fair.min_slice_examples)
        config = config_pb2.EvalConfig()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.EVAL_CONFIG_KEY], config)
        kept = [s for s in config.slicing_specs if not (list(s.feature_keys) in ([g] for g in groups)
                                                        and not s.feature_values)]
        del config.slicing_specs[:]
        config.slicing_specs.extend(kept)
        for feature in groups:
            for value in big[feature]:
                config.slicing_specs.add().feature_values[feature] = value
        logger.info("Fairness groups: %s sliced, %s too small to judge (under %d eval examples)",
                    {f: len(v) for f, v in big.items()}, {f: len(v) for f, v in small.items()},
                    fair.min_slice_examples)
        return {**exec_properties, standard_component_specs.EVAL_CONFIG_KEY: proto_utils.proto_to_json(config)}, small

    def _judge(self, output_dict: dict[str, list], settings: dict, sample: dict | None, newest: int | None,
               simple: dict | None = None, baseline=None, candidate=None,
               small_groups: dict | None = None) -> None:
        evaluation = artifact_utils.get_single_uri(output_dict[standard_component_specs.EVALUATION_KEY])
        blessings = output_dict.get(standard_component_specs.BLESSING_KEY) or []
        if not blessings or not blessings[0].has_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY):
            return  # no thresholds configured: nothing was judged
        blessing = blessings[0]
        metrics, failures = significance.read_tfma(evaluation)
        verdict = significance.judge(
            metrics, failures, settings.get("level", 0.05), settings.get("min_examples", 1)
        )
        verdict["tfma_validation_ok"] = not failures
        if sample:
            verdict["sample"] = sample
        span_settings = new_span.NewSpanSettings.from_dict(settings.get("new_span"), "new_span")
        if span_settings.enabled and newest is not None and settings.get("key_metric"):
            check = new_span.judge(significance.read_slices(evaluation, new_span.SPAN_FEATURE), metrics, newest,
                                   settings["key_metric"], span_settings)
            verdict["new_span"] = check
            if check["collapsed"]:
                verdict["blessed"] = False
                verdict["refused_for_data"] = True
                verdict["reasons"].append(check["refusal"])
            logger.info("New span %s: %s", newest, check.get("reason"))
        stale_settings = staleness.StalenessSettings.from_dict(settings.get("staleness"), "staleness")
        if stale_settings.enabled and newest is not None and settings.get("key_metric"):
            through = (baseline.get_int_custom_property(staleness.TRAINED_THROUGH)
                       if baseline is not None and baseline.has_custom_property(staleness.TRAINED_THROUGH) else None)
            verdict["staleness"] = staleness.judge(
                significance.read_slices(evaluation, new_span.SPAN_FEATURE), newest, settings["key_metric"], through,
                baseline.id if baseline is not None else None, stale_settings)
            logger.info("Staleness: %s", verdict["staleness"]["reason"])
        groups = fairness.FairnessSettings.from_dict(settings.get("fairness"), "fairness")
        if groups.active and settings.get("task"):
            check = fairness.judge({f: significance.read_slices(evaluation, f) for f in groups.slices}, metrics,
                                   settings["task"], groups, small_groups)
            verdict["fairness"] = check
            if check["refused"]:
                verdict["blessed"] = False
                verdict["reasons"].append(check["reason"])
            logger.info("Fairness: %s", check["reason"])
            for warning in check["warnings"]:
                logger.warning("Fairness: %s", warning)
        if candidate is not None:
            verdict["runtime"] = self._runtime_changes(candidate, baseline)
            logger.info("Runtime: %s", verdict["runtime"]["reason"])
        verdict["simple_baseline"] = self._simple_verdict(simple, settings)
        if verdict["simple_baseline"].get("refused"):
            verdict["blessed"] = False
            verdict["reasons"].append(verdict["simple_baseline"]["refusal"])
        io_utils.write_string_file(
            os.path.join(evaluation, significance.VERDICT_FILE), json.dumps(verdict, indent=2, sort_keys=True)
        )
        for name in (constants.BLESSED_FILE_NAME, constants.NOT_BLESSED_FILE_NAME):
            path = os.path.join(blessing.uri, name)
            if os.path.exists(path):
                os.remove(path)
        blessed = verdict["blessed"]
        io_utils.write_string_file(
            os.path.join(blessing.uri, constants.BLESSED_FILE_NAME if blessed else constants.NOT_BLESSED_FILE_NAME), ""
        )
        blessing.set_int_custom_property(
            constants.ARTIFACT_PROPERTY_BLESSED_KEY, constants.BLESSED_VALUE if blessed else constants.NOT_BLESSED_VALUE
        )
        blessing.set_string_custom_property("verdict", "; ".join(verdict["reasons"]) or "blessed")
        logger.info("Significance verdict: blessed=%s %s", blessed, "; ".join(verdict["reasons"]))
