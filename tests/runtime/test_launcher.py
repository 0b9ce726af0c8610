"""The TFX runtime's one way in (`.venv/bin/python`), run from the host side as Airflow and
the CLI do: on an old-glibc host it enters the Debian 13 root (runtime/enter.sh) with the
same paths, working directory, pid and exit code; on a new one it is a plain venv. And the
image: its build is runtime/install.sh, and the command its pods run works in this runtime."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.path.join(REPO, ".venv", "bin", "python")
ROOT = os.path.join(REPO, ".runtime", "debian13")
ENTER = os.path.join(REPO, "runtime", "enter.sh")
KIND = open(os.path.join(REPO, ".runtime", "kind")).read().strip()

_PROBE = """
import json, os, platform, sys
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(), "pid": os.getpid(),
                  "libc": platform.libc_ver()[1], "version": list(sys.version_info[:2])}))
"""


def _probe(cwd, **kw):
    out = subprocess.run([PYTHON, "-c", _PROBE], cwd=cwd, capture_output=True, text=True, check=True, timeout=60, **kw)
    return json.loads(out.stdout)


def _version(text):
    return tuple(int(x) for x in text.split("."))


def test_set_up_recorded_the_kind_this_host_needs():
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    out = subprocess.run([os.path.join(REPO, "runtime", "kind.sh")], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "RETRAIN_RUNTIME"})
    kind = out.stdout.split()[0]
    assert kind in ("native", "root") and glibc in out.stderr and kind == KIND  # says why
    if _version(glibc) < (2, 39):
        assert kind == "root"
    else:  # native names the Python 3.13 it builds the venv from
        assert kind == "root" or len(out.stdout.split()) == 2
    bad = subprocess.run([os.path.join(REPO, "runtime", "kind.sh")], capture_output=True, text=True,
                         env={**os.environ, "RETRAIN_RUNTIME": "docker"})
    assert bad.returncode == 2 and "native or root" in bad.stderr


def test_the_runtime_is_python_3_13_on_glibc_2_39_with_the_venv_s_own_paths(tmp_path):
    got = _probe(tmp_path)
    assert got["version"] == [3, 13] and _version(got["libc"]) >= (2, 39)
    # The interpreter children are started from (sys.executable) is the way in itself, and the
    # venv is the one in the repo: paths mean the same on both sides.
    assert got["executable"] == PYTHON and got["prefix"] == os.path.join(REPO, ".venv")
    assert os.path.realpath(got["cwd"]) == os.path.realpath(tmp_path)


@pytest.mark.skipif(KIND != "root", reason="this host's runtime is a plain venv (glibc 2.39+): no root to enter")
def test_the_root_shares_the_host_s_folders_pid_and_exit_code(tmp_path):
    host_libc = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    assert _probe(tmp_path)["libc"] != host_libc  # it really ran in the root
    # A file written inside is on the host at the same path, and the other way round.
    (tmp_path / "from-host").write_text("h")
    code = ("import pathlib, sys; d = pathlib.Path(sys.argv[1]); (d / 'from-root').write_text((d / 'from-host').read_text() + 'r')")
    subprocess.run([PYTHON, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert (tmp_path / "from-root").read_text() == "hr"
    # Exit codes and the pid pass through (every step execs): Airflow's process groups and
    # kills reach the Python itself.
    assert subprocess.run([PYTHON, "-c", "raise SystemExit(7)"], timeout=60).returncode == 7
    proc = subprocess.Popen([PYTHON, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert int(proc.stdout.readline()) == proc.pid
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM


@pytest.mark.skipif(KIND != "root", reason="this host's runtime is a plain venv (glibc 2.39+): no root to enter")
def test_entering_something_that_is_not_a_root_is_refused(tmp_path):
    proc = subprocess.run([ENTER, str(tmp_path), "true"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 127 and "not a TFX runtime root" in proc.stderr and "make venv" in proc.stderr


def test_the_image_is_built_by_the_runtime_s_own_install_script():
    """One recipe for the image, the root and a native venv (runtime/install.sh), so they
    cannot drift; the image is not built here (no container engine), its steps are."""
    text = open(os.path.join(REPO, "Dockerfile")).read()
    steps = re.findall(r"^RUN (.+?)(?<!\\)$", text, re.M | re.S)
    installs = re.findall(r"runtime/install\.sh (system|deps|project)", text)
    assert installs == ["system", "deps", "project"]
    for step in steps:  # nothing installed by another route
        assert not re.search(r"\b(pip|uv|apt-get) install\b", step), step
    assert re.search(r"^ARG BASE=debian:trixie-slim$", text, re.M)  # Debian 13: glibc 2.41, Python 3.13
    assert "requirements/tfx-gpu.lock" in text  # the GPU variant's CUDA 12 wheels
    # The root gets the same Debian packages (debootstrap --include reads the same list).
    assert "packages.txt" in open(os.path.join(REPO, "runtime", "root.sh")).read()


def test_the_pods_command_runs_in_this_runtime_as_the_image_runs_it(tmp_path):
    """What a pod runs (airflow_tfx.pods.ENTRYPOINT: `python -m task_host.pod --reply ... --`),
    with the runtime's bin first on PATH as the image sets it, against a real `retrain`
    command: bad input answered as exit 2 in the reply, the container itself exiting 0."""
    sys.path.insert(0, REPO)
    from airflow_tfx import pods

    reply = tmp_path / "return.json"
    command = [c if c != pods.pod.POD_REPLY_PATH else str(reply) for c in pods.ENTRYPOINT]
    env = {**os.environ, "PATH": f"{os.path.dirname(PYTHON)}:{os.environ['PATH']}"}
    proc = subprocess.run([*command, "node", "run", "--workdir", str(tmp_path), "--pipeline", "taxi",
                           "--run-id", "no-such-run", "--node", "Trainer"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(reply.read_text())
    assert answer["exit_code"] == 2 and any("no-such-run" in line for line in answer["tail"]), answer
