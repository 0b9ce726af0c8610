"""The warm TFX runtime: nodes forked from a process with TensorFlow, TFX and Beam imported give
what a cold run gives; a crashed or killed command leaves the server and other commands alone;
changed code or a different import-time environment is never run warm."""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import yaml

from core import run_folder, source_hash, spans
from task_host import client as warm
from task_host import spawn
from tests.conftest import REPO, TAXI_CONFIG, TAXI_DATA, TAXI_SCHEMA

PYTHON = sys.executable
TEMPLATE = os.path.join(REPO, "dags", "compiled", "taxi.json")


def _start_server(sock: str, *args: str, env: dict | None = None, cwd: str = REPO,
                  log: str | None = None) -> subprocess.Popen:
    return spawn.start_warm_runtime(sock, PYTHON, args, env=env, cwd=cwd, log=log, timeout_s=180)


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    sock = str(root / "tfx.sock")
    proc = _start_server(sock, log=str(root / "server.log"))
    yield {"socket": sock, "log": str(root / "server.log"), "proc": proc}
    _stop(proc)
    assert not os.path.exists(sock)  # a stopped server removes its socket


def _warm(server, *args: str, env: dict | None = None, cwd: str = REPO, repo: str = REPO):
    said = []
    proc = warm.start([PYTHON, "-m", "retrain.cli", *args], env or dict(os.environ), cwd,
                      socket_path=server["socket"], say=said.append, repo=repo)
    return proc, said


def _finish(proc) -> tuple[int, str]:
    out = proc.stdout.read()
    return proc.wait(timeout=600), out


def _config(root) -> str:
    data = root / "data"
    for s in (201302, 201303):
        shutil.copytree(spans.span_dir(TAXI_DATA, s), spans.span_dir(str(data), s))
    with open(TAXI_CONFIG) as f:
        cfg = yaml.safe_load(f)
    # The serving check stays on: it talks gRPC to a model server from inside the node.
    cfg.update(data_root=str(data), schema_path=TAXI_SCHEMA, gate_policy=os.path.join(REPO, "schemas", "taxi", "gate.yaml"),
               feature_policy=os.path.join(REPO, "schemas", "taxi", "feature_policy.yaml"),
               slice_features=[], train_epochs=None, train_steps=300, eval_steps=5, window_spans=2)
    path = root / "taxi.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _outputs(run_dir: str) -> dict[str, dict[str, list[str]]]:
    out = {}
    for path in glob.glob(os.path.join(run_dir, "nodes", "*.json")):
        with open(path) as f:
            r = json.load(f)
        out[r["node_id"]] = {k: [a["uri"] for a in v] for k, v in (r.get("outputs") or {}).items()}
    return out


def _records(uri: str) -> dict[str, list[str]]:
    """Each split's tf.Examples, canonical (a proto map's byte order differs between processes)."""
    import tensorflow as tf
    from google.protobuf import json_format

    by_split = {}
    for split in sorted(glob.glob(os.path.join(uri, "Split-*"))):
        files = sorted(glob.glob(os.path.join(split, "*.gz")))
        by_split[os.path.basename(split)] = sorted(
            json.dumps(json_format.MessageToDict(tf.train.Example.FromString(r.numpy())), sort_keys=True)
            for r in tf.data.TFRecordDataset(files, "GZIP"))
    return by_split


def _stats(uri: str) -> dict[str, str]:
    from google.protobuf import json_format
    from tensorflow_metadata.proto.v0 import statistics_pb2

    out = {}
    for path in sorted(glob.glob(os.path.join(uri, "Split-*", "FeatureStats.pb"))):
        with open(path, "rb") as f:
            stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read())
        for dataset in stats.datasets:
            dataset.features.sort(key=lambda feature: feature.path.step[0])
        out[os.path.basename(os.path.dirname(path))] = json.dumps(json_format.MessageToDict(stats), sort_keys=True)
    return out


def _transform_files(uri: str) -> dict[str, bytes]:
    """The transform graph's schemas and vocabularies."""
    out = {}
    for folder in ("transformed_metadata", "metadata", os.path.join("transform_fn", "assets")):
        for path in sorted(glob.glob(os.path.join(uri, folder, "*"))):
            with open(path, "rb") as f:
                out[os.path.relpath(path, uri)] = f.read()
    return out


def _transformed(uri: str, examples_uri: str) -> dict:
    """The transform graph applied to the eval split: its analyzers' results in numbers."""
    import tensorflow as tf
    import tensorflow_transform as tft

    files = sorted(glob.glob(os.path.join(examples_uri, "Split-eval", "*.gz")))
    raw = tf.constant([r.numpy() for r in tf.data.TFRecordDataset(files, "GZIP")])
    output = tft.TFTransformOutput(uri)
    features = output.transform_raw_features(tf.io.parse_example(raw, output.raw_feature_spec()))
    return {k: (v.values if isinstance(v, tf.SparseTensor) else v).numpy() for k, v in features.items()}


def test_nodes_run_warm_give_what_a_cold_run_gives(server, tmp_path):
    config = _config(tmp_path)
    cold = subprocess.run([PYTHON, "-m", "retrain.cli", "run", "--json", "--config", config, "--workdir",
                           str(tmp_path / "cold"), "--span", "201303"], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert cold.returncode == 0, cold.stderr[-3000:]
    cold_summary = json.loads(cold.stdout)

    work = str(tmp_path / "warm")
    base = ["--config", config, "--workdir", work]
    proc, said = _warm(server, "prepare-run", *base, "--span", "201303", "--run-id", "warm-1")
    assert proc, said
    rc, out = _finish(proc)
    assert rc == 0, out[-3000:]
    with open(TEMPLATE) as f:
        order = [n["id"] for n in json.load(f)["nodes"]]
    starts = []
    # As Airflow's tasks get it: what a node starts in turn (the serving check's server) forks warm too.
    node_env = {**os.environ, warm.SOCKET_ENV: server["socket"]}
    for node in order:
        t = time.monotonic()
        proc, said = _warm(server, "node", "run", "--workdir", work, "--pipeline", "taxi", "--run-id", "warm-1",
                           "--node", node, env=node_env)
        starts.append(time.monotonic() - t)
        assert proc, said
        rc, out = _finish(proc)
        assert rc == 0, (node, out[-3000:])
    proc, _ = _warm(server, "summary", "--workdir", work, "--pipeline", "taxi", "--run-id", "warm-1", "--json")
    rc, out = _finish(proc)
    warm_summary = json.loads(out)
    assert max(starts) < 2.0, starts  # a fork, not ~15 s of imports

    assert warm_summary["outcome"] == cold_summary["outcome"] == "pushed"
    assert warm_summary["window_spans"] == cold_summary["window_spans"] == [201302, 201303]
    # Beam (CsvExampleGen, StatisticsGen, Transform): the same records and statistics.
    cold_out = _outputs(cold_summary["run_dir"])
    warm_out = _outputs(run_folder.locate(None, work, "taxi", "warm-1"))
    assert _records(warm_out["CsvExampleGen"]["examples"][0]) == _records(cold_out["CsvExampleGen"]["examples"][0])
    assert _stats(warm_out["StatisticsGen"]["statistics"][0]) == _stats(cold_out["StatisticsGen"]["statistics"][0])
    eval_examples = cold_out["CsvExampleGen"]["examples"][0]
    assert _transform_files(warm_out["Transform"]["transform_graph"][0]) == _transform_files(
        cold_out["Transform"]["transform_graph"][0])
    warm_features = _transformed(warm_out["Transform"]["transform_graph"][0], eval_examples)
    cold_features = _transformed(cold_out["Transform"]["transform_graph"][0], eval_examples)
    assert warm_features.keys() == cold_features.keys()
    for name, values in cold_features.items():
        if not np.issubdtype(values.dtype, np.floating):
            np.testing.assert_array_equal(warm_features[name], values, err_msg=name)  # ids, buckets
            continue
        # Beam may combine an analyzer's partial sums in another order (float32 addition is
        # not associative), so a z-score's mean can move by an ulp; that shifts every value
        # by the same absolute amount, near zero too, so the bound is absolute, a few ulps
        # of the feature's own scale.
        scale = float(np.max(np.abs(values))) or 1.0
        np.testing.assert_allclose(warm_features[name], values, rtol=0,
                                   atol=16 * np.finfo(values.dtype).eps * scale, err_msg=name)
    # TensorFlow (Trainer, Evaluator): training on CPU is not bit-reproducible between
    # processes, cold or warm (three cold runs of this config: AUC 0.868, 0.852, 0.866), so
    # the same evaluation data and model quality within that spread; gRPC (ServingCheck) passed.
    warm_eval, cold_eval = warm_summary["evaluation"]["candidate"], cold_summary["evaluation"]["candidate"]
    assert warm_eval["example_count"] == cold_eval["example_count"]
    assert warm_eval["auc"] == pytest.approx(cold_eval["auc"], abs=0.05)
    assert warm_summary["blessed"] and cold_summary["blessed"]
    assert warm_summary["serving_check"]["passed"] and cold_summary["serving_check"]["passed"]

    def server_started(summary) -> str:
        with open(summary["serving_check"]["report"]) as f:
            return json.load(f)["server_started"]
    assert (server_started(warm_summary), server_started(cold_summary)) == ("warm", "cold")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_forks_from_a_process_that_runs_nothing_but_its_loop(server):
    """At fork time: Python's main thread only (no Beam, gRPC or TF threads of ours); the
    native threads are those the imports start (Arrow's jemalloc background thread, which
    re-initialises after fork, and idle library pools), never more as commands run."""
    state = warm.ping(server["socket"])
    assert state["python_threads"] == ["MainThread"]
    # The main thread is named for the interpreter binary: `python` in a plain venv,
    # `python3.13` where the launcher execs it in the runtime root (runtime/python.sh).
    interpreter = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    assert len(state["threads"]) <= 4 and set(state["threads"]) <= interpreter | {"jemalloc_bg_thd"}, state["threads"]


def test_a_killed_command_leaves_the_server_and_the_next_command_alone(server, tmp_path):
    rest, grpc_port = _free_port(), _free_port()
    # A model server (gRPC and REST) in a forked child, killed with SIGKILL like a crash.
    proc, said = _warm(server, "serve", "--workdir", str(tmp_path), "--rest-port", str(rest), "--grpc-port",
                       str(grpc_port))
    assert proc, said
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{rest}/v1/models/taxi", timeout=2)
            break
        except urllib.error.HTTPError:  # it answers (no model there yet): up
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()[-2000:]
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    state = warm.ping(server["socket"])
    assert state and state["pid"] == server["proc"].pid
    proc, _ = _warm(server, "spans", "--config", TAXI_CONFIG)
    rc, out = _finish(proc)
    assert rc == 0 and "201612" in out


def test_a_client_that_goes_away_takes_its_command_with_it(server, tmp_path):
    rest = _free_port()
    proc, said = _warm(server, "serve", "--workdir", str(tmp_path), "--rest-port", str(rest), "--grpc-port",
                       str(_free_port()))
    assert proc, said
    pid = proc.pid
    proc._sock.close()  # the Airflow task process died
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the command outlived its client")


def test_usage_errors_and_exit_codes_are_the_cold_ones(server, tmp_path):
    for args in (["nosuch"], ["summary", "--run-dir", str(tmp_path / "missing")]):
        cold = subprocess.run([PYTHON, "-m", "retrain.cli", *args], capture_output=True, text=True, cwd=REPO)
        proc, said = _warm(server, *args)
        assert proc, said
        rc, out = _finish(proc)
        assert rc == cold.returncode == 2, (rc, out, cold.stderr)
        assert out.strip().splitlines()[-1] == cold.stderr.strip().splitlines()[-1]


def test_stdout_and_stderr_apart_as_subprocess_gives_them(server, tmp_path):
    # separate_stderr: the test suite's and scripts' path (JSON on stdout, progress on stderr).
    args = ["summary", "--run-dir", str(tmp_path / "missing")]
    cold = subprocess.run([PYTHON, "-m", "retrain.cli", *args], capture_output=True, text=True, cwd=REPO)
    proc = warm.start([PYTHON, "-m", "retrain.cli", *args], dict(os.environ), REPO, socket_path=server["socket"],
                      separate_stderr=True)
    assert proc is not None
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (cold.returncode, cold.stdout, cold.stderr) and "missing" in err
    # Past its timeout a command's process group is killed, as subprocess.run does.
    slow = warm.start([PYTHON, "-m", "retrain.cli", "serve", "--model-name", "x", "--model-base-path", str(tmp_path),
                       "--rest-port", "0", "--grpc-port", "0"], dict(os.environ), REPO, socket_path=server["socket"],
                      separate_stderr=True)
    with pytest.raises(subprocess.TimeoutExpired):
        slow.communicate(timeout=3)
    assert slow.wait(timeout=30) == -signal.SIGKILL


def test_a_forked_command_names_itself_in_ps_not_the_server(server, tmp_path):
    proc = warm.start([PYTHON, "-m", "retrain.cli", "serve", "--model-name", "titled", "--model-base-path", str(tmp_path),
                       "--rest-port", "0", "--grpc-port", "0"], dict(os.environ), REPO, socket_path=server["socket"],
                      separate_stderr=True)
    assert proc is not None
    try:
        def cmdline() -> str:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode().strip()

        with open(f"/proc/{server['proc'].pid}/cmdline", "rb") as f:
            assert b"task_host.warm_server" in f.read()  # the server keeps its own
        # The command names itself as it starts (until then it shows its monitor's title).
        deadline = time.monotonic() + 60
        while not cmdline().startswith("retrain: ") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cmdline().startswith("retrain: serve --model-name titled"), cmdline()
        assert "warm_server" not in cmdline()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_refuses_other_code_another_interpreter_and_another_import_time_environment(server):
    proc, said = _warm(server, "spans", env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc is None and "TF_ENABLE_ONEDNN_OPTS" in said[0]
    said = []
    assert warm.start(["/usr/bin/python3", "-m", "retrain.cli", "spans"], dict(os.environ), REPO,
                      socket_path=server["socket"], say=said.append) is None
    assert "interpreter" in said[0]
    said = []
    assert warm.start([PYTHON, "-m", "os", "spans"], dict(os.environ), REPO,
                      socket_path=server["socket"], say=said.append) is None
    assert "module 'os' is not run here" in said[0]


def test_restarts_when_the_code_changes_and_never_runs_the_old_code(tmp_path):
    # A copy of the project's packages, served with a light preload so the restart is quick.
    copy = tmp_path / "repo"
    for package in source_hash.RUNTIME_PACKAGES:
        shutil.copytree(os.path.join(REPO, package), copy / package,
                        ignore=shutil.ignore_patterns("__pycache__", "tests"))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    sock = str(tmp_path / "s.sock")
    log = str(tmp_path / "server.log")
    proc = _start_server(sock, "--preload", "core.layout", env=env, cwd=str(copy), log=log)
    try:
        server = {"socket": sock}
        before = warm.ping(sock)
        assert before["fingerprint"] == source_hash.runtime_fingerprint(str(copy))
        with open(copy / "core" / "exit_codes.py", "a") as f:
            f.write("\nWARM_TEST_MARKER = 1\n")
        refused, said = _warm(server, "spans", env=env, cwd=str(copy), repo=str(copy))
        assert refused is None and "code changed" in said[0]
        deadline = time.monotonic() + 120
        while (state := warm.ping(sock)) is None or state["fingerprint"] == before["fingerprint"]:
            assert time.monotonic() < deadline, open(log).read()[-3000:]
            time.sleep(0.5)
        assert state["fingerprint"] == source_hash.runtime_fingerprint(str(copy))
        assert state["pid"] == before["pid"]  # the same process, re-executed
        ran, said = _warm(server, "spans", "--config", TAXI_CONFIG, env=env, cwd=str(copy), repo=str(copy))
        assert ran, said
        assert _finish(ran)[0] == 0
    finally:
        _stop(proc)
