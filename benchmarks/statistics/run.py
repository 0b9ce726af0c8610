"""Benchmark: StatisticsGen's two engines on taxi-like spans of growing size.

For each size: a month of that many rows (`retrain scale-spans` from the embedded taxi
data), encoded once by CsvExampleGen's fast engine, then profiled by StatisticsGen's
executor with `engine: beam` (TFX's executor on Beam's in-memory DirectRunner) and
`engine: in-memory` (TFDV over each whole split). Each engine runs in its own fresh
process (imports excluded from its seconds), so peak RSS is that engine's; the statistics
of the two are compared feature by feature to 10 significant digits, except the bucket
counts of the approximate quantile histograms, which depend on how the sketch's partial
results were merged (Beam merges one per bundle). Prints a Markdown
table: the figures behind `statistics.in_memory_below_mb`.

    TF_USE_LEGACY_KERAS=1 .venv/bin/python benchmarks/statistics/run.py [--rows 1000,100000,300000] [--root work/bench-statistics]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

SPAN = 201612


def _encode(data_root: str, out: str) -> None:
    from tfx.dsl.components.base import base_beam_executor
    from tfx.proto import example_gen_pb2
    from tfx.types import standard_artifacts, standard_component_specs
    from tfx.utils import proto_utils

    from components.example_gen import executor
    from components.example_gen.settings import IngestSettings
    from core import spans
    props = {
        standard_component_specs.INPUT_BASE_KEY: spans.span_dir(data_root, SPAN),
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="single_split", pattern="*.csv")])),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Output(
            split_config=example_gen_pb2.SplitConfig(splits=[
                example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=2),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)]))),
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        standard_component_specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
        standard_component_specs.CUSTOM_CONFIG_KEY: proto_utils.proto_to_json(
            executor.custom_config(IngestSettings(engine="fast"))),
    }
    examples = standard_artifacts.Examples()
    examples.uri = out
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[], tmp_dir=out + ".tmp", unique_id="1")
    executor.Executor(context).Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, props)
    with open(out + ".json", "w") as f:
        json.dump({"split_names": examples.split_names}, f)


def _profile(examples_uri: str, engine: str, out: str) -> None:
    """In a fresh process: one engine's seconds and peak RSS; the statistics under `out`."""
    import resource
    import time

    from tfx.dsl.components.base import base_beam_executor
    from tfx.types import standard_artifacts, standard_component_specs

    from components.data_gate import measures
    from components.statistics_gen import executor
    examples = standard_artifacts.Examples()
    examples.uri = examples_uri
    with open(examples_uri + ".json") as f:
        examples.split_names = json.load(f)["split_names"]
    examples.span = SPAN
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = out
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[], tmp_dir=out + ".tmp", unique_id="1")
    started = time.monotonic()
    executor.Executor(context).Do(
        {standard_component_specs.EXAMPLES_KEY: [examples]}, {standard_component_specs.STATISTICS_KEY: [statistics]},
        {standard_component_specs.STATS_OPTIONS_JSON_KEY: measures.stats_options().to_json(),
         standard_component_specs.EXCLUDE_SPLITS_KEY: "[]", executor.ENGINE_KEY: engine})
    print(json.dumps({"seconds": time.monotonic() - started,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _compare(a: str, b: str) -> str:
    """'identical' (to 10 significant digits), or how far the approximate quantile
    histograms' bucket counts differ where everything else is identical, or 'DIFFERENT'."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from components.statistics_gen import compare

    def load(root, split):
        with open(os.path.join(root, f"Split-{split}", "FeatureStats.pb"), "rb") as f:
            [d] = statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read()).datasets
        return compare.by_feature(d)

    widest = [0.0]

    def same(x, y) -> bool:
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            for k in x:
                if k == "sampleCount" and isinstance(x[k], float) and isinstance(y[k], float):
                    widest[0] = max(widest[0], abs(x[k] - y[k]))  # a quantile sketch's bucket count
                elif not same(x[k], y[k]):
                    return False
            return True
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(same(i, j) for i, j in zip(x, y))
        return x == y  # numbers already rounded by compare.by_feature

    if not all(same(load(a, s), load(b, s)) for s in ("train", "eval")):
        return "DIFFERENT"
    return "identical" if widest[0] < 1e-6 else f"identical but quantile bucket counts (widest gap {widest[0]:.2f} examples)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000,100000,300000")
    parser.add_argument("--root", default=os.path.join(REPO, "work", "bench-statistics"))
    parser.add_argument("--profile", nargs=3, help=argparse.SUPPRESS)  # examples, engine, out (child process)
    args = parser.parse_args()
    if args.profile:
        return _profile(*args.profile)
    from runner import scale_spans
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1"}
    print("| rows | span CSV MB | engine | seconds | peak RSS MB | statistics vs Beam's |")
    print("| --- | --- | --- | --- | --- | --- |")
    for rows in (int(r) for r in args.rows.split(",")):
        root = os.path.join(args.root, str(rows))
        data, examples = os.path.join(root, "data"), os.path.join(root, "examples")
        if not os.path.exists(examples + ".json"):
            scale_spans.write_spans(data, [SPAN], rows, seed=0)
            _encode(data, examples)
        csv_mb = sum(e.stat().st_size for e in os.scandir(os.path.join(data, f"span-{SPAN}"))) / (1 << 20)
        outs = {}
        for engine in ("beam", "in-memory"):
            out = outs[engine] = os.path.join(root, f"stats-{engine}")
            subprocess.run(["rm", "-rf", out, out + ".tmp"], check=True)
            proc = subprocess.run([sys.executable, __file__, "--profile", examples, engine, out], env=env,
                                  capture_output=True, text=True, check=True)
            fig = json.loads(proc.stdout.strip().splitlines()[-1])
            same = _compare(outs["beam"], out) if engine == "in-memory" else ""
            print(f"| {rows:,} | {csv_mb:.1f} | {engine} | {fig['seconds']:.2f} | {fig['peak_rss_mb']:.0f} | {same} |",
                  flush=True)


if __name__ == "__main__":
    main()
