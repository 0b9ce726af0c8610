"""The layer rule (docs/ARCHITECTURE.md): imports go only downward, and no module cycle.

Reads every module's imports (top-level and inside functions: a lazy import is still a
dependency) with `ast`, so it needs neither TensorFlow nor Airflow.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Package -> the project packages it may import. Bottom first.
ALLOWED = {
    "core": set(),
    "task_host": {"core"},
    "csv_engine": {"core"},
    "parquet_engine": {"core", "csv_engine"},
    "trainer_toolkit": {"core"},
    "serving": {"core"},
    "governance": {"core", "serving"},
    "components": {"core", "task_host", "csv_engine", "parquet_engine", "trainer_toolkit", "serving", "governance"},
    "rollout": {"core", "serving", "governance"},
    "pipelines": {"core", "trainer_toolkit", "serving", "governance", "components", "rollout"},
    "airflow_tfx": {"core", "task_host"},
    "runner": {"core", "task_host", "csv_engine", "parquet_engine", "trainer_toolkit", "serving", "governance", "components", "pipelines", "rollout",
               "airflow_tfx"},
    "retrain": {"core", "task_host", "csv_engine", "parquet_engine", "trainer_toolkit", "serving", "governance", "components", "pipelines", "rollout",
                "airflow_tfx", "runner"},
    "dags": {"airflow_tfx", "core"},
}
PROJECT = set(ALLOWED)


def _modules() -> dict[str, str]:
    """Module name -> file, for every .py file of the layered packages."""
    out = {}
    for package in ALLOWED:
        for root, _, names in os.walk(os.path.join(REPO, package)):
            for name in names:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(root, name), REPO)[:-3].replace(os.sep, ".")
                    out[rel.removesuffix(".__init__")] = os.path.join(root, name)
    return out


def _imports(path: str, module: str) -> set[str]:
    """Project modules (as dotted names) a file imports."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                parts = module.split(".")
                base = ".".join(parts[: len(parts) - node.level + (1 if path.endswith("__init__.py") else 0)]
                                + ([base] if base else []))
            found.update(f"{base}.{a.name}" for a in node.names)  # a module, or a name in `base`
    return {m for m in found if m.split(".")[0] in PROJECT}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        # `from pkg import mod` names a module when one exists, else an attribute of pkg.
        graph[name] = {m if m in modules else m.rsplit(".", 1)[0] for m in _imports(path, name)}
        graph[name] = {m for m in graph[name] if m in modules and m != name}
    return graph


def upward_imports() -> list[str]:
    return sorted(
        f"{src} imports {dst}"
        for src, deps in _graph().items() for dst in deps
        if dst.split(".")[0] != src.split(".")[0] and dst.split(".")[0] not in ALLOWED[src.split(".")[0]]
    )


def cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph, index, low, stack, on, out = _graph(), {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_package_is_in_a_layer():
    top_level = {n for n in os.listdir(REPO) if os.path.isfile(os.path.join(REPO, n, "__init__.py"))}
    assert top_level - {"tests"} <= PROJECT, f"packages without a layer: {sorted(top_level - PROJECT - {'tests'})}"


def test_imports_only_go_downward():
    problems = upward_imports()
    print(f"\nlayer rule: {len(_graph())} modules, {sum(map(len, _graph().values()))} project imports,"
          f" {len(problems)} upward")
    assert not problems, "upward imports:\n" + "\n".join(problems)


def test_no_import_cycle():
    found = cycles()
    print(f"\nimport cycles: {len(found)}")
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_version_management_does_not_import_the_server():
    # serving/repository/ (the on-disk versions, labels, history, signatures) is read by the
    # Pusher, the CLI, governance and the rollout controller without a server: it sits below
    # serving/server/, which reads it.
    graph = _graph()
    wrong = sorted(f"{src} imports {dst}" for src, deps in graph.items() if src.startswith("serving.repository")
                   for dst in deps if dst.startswith("serving.server"))
    assert wrong == [], wrong


def test_the_checker_sees_upward_imports_and_cycles(monkeypatch):
    """The rule test itself fails on a violation (checked on a made-up graph)."""
    fake = {"core.a": {"runner.b"}, "runner.b": {"core.a"}, "serving.c": set()}
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: fake)
    assert upward_imports() == ["core.a imports runner.b"]
    assert cycles() == [["core.a", "runner.b"]]


def test_core_and_airflow_glue_import_no_tensorflow():
    """The bottom layer, what the Airflow side imports and the gRPC front end stay light (no TF, TFX, Beam)."""
    code = (
        "import sys\n"
        "import core.exit_codes, core.errors, core.files, core.layout, core.nodes, core.outcome, core.results,"
        " core.run_folder, core.spans, core.logs, task_host.protocol, task_host.client, task_host.pod, task_host.spawn,"
        " serving.repository.base_path, serving.repository.versions, serving.server.grpc_front, retrain.cli\n"
        "heavy = sorted(m for m in ('tensorflow', 'tfx', 'apache_beam', 'tensorflow_model_analysis') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_tfx_v1_names_are_tfx_v1s_own_objects():
    """components/tfx_v1.py takes tfx.v1's names from the modules tfx.v1 re-exports."""
    from tfx import v1

    from components.tfx_v1 import tfx

    for group in ("components", "dsl", "proto", "types"):
        ours = vars(getattr(tfx, group))
        for name, value in ours.items():
            if isinstance(value, type(tfx)):
                for inner, obj in vars(value).items():
                    assert obj is getattr(getattr(getattr(v1, group), name), inner), f"tfx.{group}.{name}.{inner}"
            else:
                assert value is getattr(getattr(v1, group), name), f"tfx.{group}.{name}"


def test_a_run_imports_no_google_cloud_extensions():
    """What `retrain run` imports (the factory, the runner, the executors) leaves tfx.v1 and
    its Google Cloud extensions out (8.6 s of imports per process)."""
    code = ("import sys; from core import keras_env; import pipelines.factory, runner.runs, runner.node_runner, "
            "components.evaluator.executor, components.example_gen.executor, components.trainer.executor; "
            "print(sorted(m for m in sys.modules if m == 'tfx.v1' or 'aiplatform' in m)[:5])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
