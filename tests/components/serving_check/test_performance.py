"""Computing performance against the baseline: known answers, and a slower candidate refused
by the serving check with both figures."""

import os

import pytest
import tensorflow as tf

from components.serving_check import executor, performance
from core.settings import SettingsError

SETTINGS = performance.PerformanceSettings()


def test_known_answers_of_the_comparison():
    candidate = {"latency_p50_ms": 30.0, "latency_p99_ms": 40.0, "saved_model_bytes": 3000, "training_examples_per_sec": 400}
    baseline = {"latency_p50_ms": 10.0, "latency_p99_ms": 30.0, "saved_model_bytes": 1000, "training_examples_per_sec": 1000}
    out = performance.compare(candidate, baseline, SETTINGS)
    f = out["figures"]
    assert f["latency_p50_ms"]["change"] == 2.0 and f["latency_p50_ms"]["past_limit"]  # +200% > +100%: refuses
    assert not f["latency_p99_ms"]["past_limit"]  # +33% within +200%
    assert f["saved_model_bytes"]["past_limit"] and f["saved_model_bytes"]["action"] == "warn"
    assert f["training_examples_per_sec"]["change"] == -0.6 and f["training_examples_per_sec"]["past_limit"]
    assert out["refusals"] == ["latency_p50_ms 30 vs the baseline's 10 (+200%, past the limit of +100%)"]
    assert out["warnings"] == ["saved_model_bytes 3,000 vs the baseline's 1,000 (+200%, past the limit of +100%)",
                               "training_examples_per_sec 400 vs the baseline's 1,000 (-60%, past the limit of -50%)"]
    # A 3 ms rise on a 1 ms model is noise under min_latency_rise_ms (5 ms), whatever its ratio.
    fast = performance.compare({"latency_p50_ms": 4.0}, {"latency_p50_ms": 1.0}, SETTINGS)
    assert not fast["figures"]["latency_p50_ms"]["past_limit"] and not fast["refusals"]
    assert set(fast["not_compared"]) == {"latency_p99_ms", "saved_model_bytes", "training_examples_per_sec"}


def test_settings_name_the_bad_key():
    with pytest.raises(SettingsError, match="max_increase.training_examples_per_sec: not a figure it takes"):
        performance.PerformanceSettings.from_dict({"max_increase": {"training_examples_per_sec": 1}}, "performance")
    with pytest.raises(SettingsError, match="refuse: 'ram' is not a figure"):
        performance.PerformanceSettings.from_dict({"refuse": ["ram"]}, "performance")


def test_the_saved_model_size_leaves_out_assets_extra(tmp_path):
    (tmp_path / "variables").mkdir()
    (tmp_path / "saved_model.pb").write_bytes(b"x" * 100)
    (tmp_path / "variables" / "v").write_bytes(b"x" * 50)
    (tmp_path / "assets.extra").mkdir()
    (tmp_path / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"x" * 1000)
    assert performance.saved_model_bytes(str(tmp_path)) == 150


class _Model(tf.Module):
    """serving_default: serialized tf.Examples (feature x) -> x * w; `work` matmuls first."""

    def __init__(self, work: int):
        super().__init__()
        self.w = tf.Variable(2.0)
        self.m = tf.Variable(tf.eye(128) * 0.5)
        self.work = work

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, examples):
        x = tf.io.parse_example(examples, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]
        if self.work:  # a planted slowdown: `work` 128x128 matmuls, no effect on the answer
            m = tf.while_loop(lambda i, m: i < self.work, lambda i, m: (i + 1, tf.matmul(m, self.m) + self.m),
                              (tf.constant(0), self.m))[1]
            x = x + 0.0 * tf.reduce_sum(m)
        return {"outputs": x * self.w}


def _export(path, work: int) -> str:
    model = _Model(work)
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve})
    return str(path)


def _examples(tmp_path) -> list[str]:
    path = str(tmp_path / "eval.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(20):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)]))})).SerializeToString())
    return [path]


def test_a_slower_candidate_is_refused_by_the_serving_check_with_both_figures(tmp_path):
    baseline = _export(tmp_path / "baseline", work=0)
    slow = _export(tmp_path / "slow", work=3000)
    report = executor.run_check(slow, _examples(tmp_path), "toy", str(tmp_path / "check"), num_requests=20,
                                max_latency_ms=10_000, baseline_dir=baseline, performance_settings=SETTINGS,
                                training_rates=(900.0, 1000.0))
    perf = report["performance"]
    p50 = perf["figures"]["latency_p50_ms"]
    assert p50["past_limit"] and p50["candidate"] > p50["baseline"] + 5, perf
    assert not report["passed"]
    [reason] = [r for r in report["reasons"] if "computing performance regressed" in r]
    # Figures as the check writes them (thousands grouped): a loaded machine can make the slow one >= 1,000 ms.
    assert (f"latency_p50_ms {performance._fmt(p50['candidate'])} vs the baseline's"
            f" {performance._fmt(p50['baseline'])}") in reason
    assert perf["figures"]["training_examples_per_sec"]["change"] == pytest.approx(-0.1)
    assert perf["requests_each"] == 20
    # The same model as its own baseline: nothing past a limit, the check passes.
    same = executor.run_check(baseline, _examples(tmp_path), "toy", str(tmp_path / "check2"), num_requests=20,
                              max_latency_ms=10_000, baseline_dir=baseline, performance_settings=SETTINGS)
    assert same["passed"], same["reasons"]
    assert not same["performance"]["refusals"] and "training_examples_per_sec" in same["performance"]["not_compared"]
    assert not os.path.exists(str(tmp_path / "check" / "baseline"))  # the check's copies are removed
