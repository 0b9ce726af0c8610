"""`make rollout-demo`: a good canary promoted and a bad canary rolled back, from delayed
labels, on the embedded taxi data, through Airflow (visible in its grid), the governance
report and MLMD.

  1. taxi_retraining for 2015-05 (through `airflow dags test`): the first model, `stable`;
  2. `retrain serve` on loopback, every request logged with its key;
  3. taxi_retraining for 2015-06: a blessed candidate, pushed as `canary` beside stable;
  4. traffic: the real trips of the months after (2015-07 to 2016-12, 3,064 trips, cycled)
     as keyed requests through the split, then their true labels (the pipeline's label_fn)
     as a feedback file; taxi_rollout decides: promote;
  5. a degraded version (scores that ignore the trip: what a model trained on shuffled
     labels gives), pushed as the canary on purpose and said so in its history; traffic and
     labels again; taxi_rollout decides: roll back, while stable answers throughout.

  .venv/bin/python -m runner.rollout_demo --workdir work/rollout-demo [--requests N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from core import layout, project, spans

REPO = project.ROOT
CONFIG = os.path.join(REPO, "pipelines", "taxi", "config.yaml")


def say(message: str) -> None:
    sys.stderr.write(f"[rollout-demo] {message}\n")
    sys.stderr.flush()


def degraded_copy(source: str, target: str) -> None:
    """A SavedModel with `source`'s serving signature whose scores ignore the example's
    content's meaning: a hash of the serialized example, uniform in [0, 1) (AUC about 0.5)."""
    import tensorflow as tf

    served = tf.saved_model.load(source)
    spec = served.signatures["serving_default"].structured_input_signature[1]
    [(name, tensor_spec)] = list(spec.items())
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec(tensor_spec.shape, tensor_spec.dtype, name=name)])
    def serve(examples):
        buckets = tf.strings.to_hash_bucket_fast(examples, 100_000)
        return {"outputs": tf.reshape(tf.cast(buckets, tf.float32) / 100_000.0, [-1, 1])}

    module.serve = serve
    tf.saved_model.save(module, target, signatures={"serving_default": serve})


def push_degraded(workdir: str, model: str, share: float) -> int:
    """Pushes a degraded copy of the stable version as the canary (a demo of a bad canary:
    no pipeline run blessed it, and its history says so)."""
    from components.atomic_pusher.executor import atomic_copy_dir, next_version
    from serving.repository import history, versions

    root = layout.serving_root(workdir)
    base = os.path.join(root, model)
    stable = versions.hold(root, model)
    staging = os.path.join(workdir, "rollout-demo-degraded")
    shutil.rmtree(staging, ignore_errors=True)
    degraded_copy(os.path.join(base, str(stable)), staging)
    version = next_version(base)
    atomic_copy_dir(staging, base, version, push_info={"version": version, "degraded_on_purpose": True})
    history.append(base, "push", version=version, user="rollout-demo",
                   reason="rollout demo: a degraded model pushed as the canary on purpose")
    versions.start_canary(root, model, version, share, user="rollout-demo",
                          reason="rollout demo: a degraded model under test on purpose")
    return version


def _airflow(env: dict, dag: str, date: str, conf: dict | None = None, task: str | None = None) -> str:
    """One DAG run through `airflow dags test`; with `task`, that task's XCom (its answer)."""
    args = [os.path.join(REPO, "scripts", "airflow.sh"), "test-dag", date]
    if conf:
        args += ["--conf", json.dumps(conf)]
    proc = subprocess.run(args, env={**env, "RETRAIN_DAG": dag}, capture_output=True, text=True, timeout=3600)
    tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
    say(f"{dag} {date}: {tail[0]}")
    if "state=success" not in proc.stderr:
        raise SystemExit(f"{dag} did not succeed:\n{proc.stderr[-3000:]}")
    if task is None:
        return proc.stderr
    run_id = proc.stderr.split("run_id=")[1].split()[0]
    states = subprocess.run([os.path.join(REPO, ".venv-airflow", "bin", "airflow"), "tasks", "states-for-dag-run", dag,
                             run_id, "-o", "json"], env=env, capture_output=True, text=True)
    ran = {t["task_id"]: t["state"] for t in json.loads(states.stdout[states.stdout.index("["):])}
    if ran.get(task) != "success":
        raise SystemExit(f"{dag}: task {task} did not run ({ran})")
    return proc.stderr


def _serve(workdir: str, port_file: str) -> subprocess.Popen:
    log = open(os.path.join(workdir, "logs", "rollout-demo-serve.log"), "a")
    server = subprocess.Popen(
        [sys.executable, "-m", "retrain.cli", "serve", "--config", CONFIG, "--workdir", workdir, "--rest-port", "0",
         "--grpc-port", "0", "--port-file", port_file, "--request-log-sampling-rate", "1.0",
         "--request-log-max-file-seconds", "2", "--request-log-max-files", "10000", "--poll-seconds", "0.5"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180
    while not os.path.exists(port_file):
        if server.poll() is not None or time.time() > deadline:
            raise SystemExit("retrain serve did not start; see logs/rollout-demo-serve.log")
        time.sleep(0.3)
    return server


def _traffic(config, url: str, spans: list[int], requests: int, name: str) -> None:
    from rollout import simulate
    from runner import rollout_traffic

    examples, labels = [], []
    for span in spans:
        e, y = rollout_traffic.span_examples_and_labels(config, span)
        examples += e
        labels += list(y)
    rows = len(examples)
    examples = [examples[i % rows] for i in range(requests)]
    labels = [labels[i % rows] for i in range(requests)]
    sent = simulate.replay(url, config.model_name, examples, name, max_seconds=1800, concurrency=8)
    say(f"{name}: {sent.sent} requests answered ({sent.failed} failed) in {sent.seconds:.0f} s "
        f"({rows} distinct trips of spans {spans[0]}..{spans[-1]})")
    path = simulate.write_feedback(layout.feedback_dir(config.workdir, config.model_name), name, sent.keys,
                                   labels[: len(sent.keys)])
    say(f"{name}: their true labels in {path}")
    time.sleep(4)  # the server closes its last request-log file


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default=os.path.join(REPO, "work", "rollout-demo"))
    p.add_argument("--requests", type=int, default=40000, help="per canary test")
    p.add_argument("--fresh", action="store_true", help="start from an empty workdir")
    args = p.parse_args(argv)
    from pipelines import config as config_lib
    from rollout import controller
    from serving.repository import history

    workdir = os.path.abspath(args.workdir)
    if args.fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(os.path.join(workdir, "logs"), exist_ok=True)
    config = config_lib.load(CONFIG, {"workdir": workdir, "data_root": None})
    env = {**os.environ, "AIRFLOW_HOME": os.path.join(workdir, "airflow"), "RETRAIN_WORKDIR": workdir,
           "RETRAIN_TFX_PYTHON": sys.executable}
    base = os.path.join(layout.serving_root(workdir), config.model_name)
    say("1. the first model (span 201505) becomes stable")
    _airflow(env, "taxi_retraining", "2015-06-01")
    port_file = os.path.join(workdir, "rollout-demo-ports.json")
    if os.path.exists(port_file):
        os.remove(port_file)
    server = _serve(workdir, port_file)
    try:
        url = f"http://127.0.0.1:{json.load(open(port_file))['rest']}"
        say(f"2. retrain serve at {url}, every request logged with its key")
        say("3. the next month's candidate (span 201506)")
        _airflow(env, "taxi_retraining", "2015-07-01")
        state = controller.status(workdir, config.model_name)
        if not state["canary"]:
            raise SystemExit(f"the 201506 candidate is not under test (labels {state['labels']}); see its report")
        say(f"   canary {state['canary']['canary']} beside stable {state['canary']['stable']}")
        say("4. traffic and delayed labels for the good canary")
        later = [span for span in spans.list_spans(config.data_root) if span > 201506]
        _traffic(config, url, later, args.requests, "good-canary")
        _airflow(env, "taxi_rollout", "2026-01-02", task="decide_canary")  # after the rollout DAG's start date
        say(f"   history: {history.read(base)[-1]['event']}")
        say("5. a degraded canary (on purpose)")
        bad = push_degraded(workdir, config.model_name, config.rollout_settings.canary_share)
        time.sleep(2)
        _traffic(config, url, later, args.requests // 4, "bad-canary")
        _airflow(env, "taxi_rollout", "2026-01-03", task="decide_canary")
        say(f"   history: {history.read(base)[-1]['event']} of version {bad}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    from core import metadata

    store = metadata.open_store(config.metadata_store, readonly=True)
    for d in controller.decisions(store, config.model_name):
        say(f"MLMD RolloutDecision {d['id']}: {d['action']} canary {d['canary_version']}: {d['reason']}")
    say(f"Airflow: AIRFLOW_HOME={env['AIRFLOW_HOME']} (grid: taxi_retraining, taxi_rollout); reports under "
        f"{os.path.join(layout.pipeline_root(workdir, 'taxi'), layout.REPORT_DIR)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
