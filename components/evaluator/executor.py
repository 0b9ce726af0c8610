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

from components.evaluator import new_span, significance

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
            super().Do(input_dict, output_dict, exec_properties)
        finally:
            shutil.rmtree(sample_dir, ignore_errors=True)
        newest = max((a.get_int_custom_property("span") for a in examples), default=None)
        self._judge(output_dict, settings, sample, newest)

    def _judge(self, output_dict: dict[str, list], settings: dict, sample: dict | None, newest: int | None) -> None:
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
