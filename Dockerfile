# The TFX runtime as an image (TFX 1.21, TensorFlow 2.21, Python 3.13 on Debian 13), for the
# pod execution mode (`airflow.execution: kubernetes`, airflow_tfx/pods.py). Built by the same
# script as every other runtime (runtime/install.sh: Debian's packages, the lock files synced
# with uv, the project, its SBOM, bytecode), so the image, the Debian 13 root `make venv`
# creates on old-glibc hosts and a native venv cannot drift; tests/runtime runs the pods'
# command inside that root.
#
#   docker build -t registry.example/retrain-tfx:$(git rev-parse --short HEAD) .
#   docker build --build-arg VARIANT=gpu -t registry.example/retrain-tfx-gpu:$(git rev-parse --short HEAD) .
#
# Build it from the same commit as the DAGs Airflow runs: prepare_run compares the pipeline
# code's fingerprint with the DAG's template and refuses a mismatch.
# GPU nodes (VARIANT=gpu): requirements/tfx-gpu.lock adds NVIDIA's CUDA 12 / cuDNN 9 wheels that
# `tensorflow[and-cuda]==2.21.0` names (TF 2.21 is built and tested with CUDA 12.5, cuDNN 9.3);
# the node needs only the NVIDIA driver (>= 525, CUDA 12) and its device plugin
# (docs/guides/training.md).
ARG BASE=debian:trixie-slim
FROM ${BASE}
ARG VARIANT=cpu

# PYTHONDONTWRITEBYTECODE: the pods run as uid 1000, which cannot write __pycache__ under
# /opt/venv; the bytecode comes from the build (runtime/install.sh compiles it).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

WORKDIR /opt/retrain
# Debian's packages first (runtime/packages.txt: Python 3.13, a compiler for pyfarmhash).
COPY runtime runtime
RUN runtime/install.sh system

# Dependencies next (their layer survives code changes), exactly the lock file's pins.
COPY requirements/tfx.lock requirements/tfx-gpu.lock requirements/tfx-nodeps.txt requirements/
RUN if [ "$VARIANT" = gpu ]; then lock=requirements/tfx-gpu.lock; else lock=requirements/tfx.lock; fi \
 && PYTHON=/usr/bin/python3.13 runtime/install.sh deps /opt/venv "$lock"

# The project: packages, configs, curated schemas, compiled DAG templates, embedded data.
COPY setup.py pyproject.toml ./
COPY core core
COPY task_host task_host
COPY serving serving
COPY governance governance
COPY components components
COPY csv_engine csv_engine
COPY parquet_engine parquet_engine
COPY trainer_toolkit trainer_toolkit
COPY rollout rollout
COPY pipelines pipelines
COPY runner runner
COPY retrain retrain
COPY airflow_tfx airflow_tfx
COPY schemas schemas
COPY dags/compiled dags/compiled
COPY data data
RUN runtime/install.sh project /opt/venv \
 && python -c "import tfx, retrain.cli, task_host.pod" \
 && useradd --uid 1000 --no-create-home --home-dir /opt/retrain retrain

USER 1000
# Pods run `python -m task_host.pod -- <retrain command>` (the operator sets the command).
CMD ["python", "-m", "retrain.cli", "--help"]
