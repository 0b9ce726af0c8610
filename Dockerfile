# The TFX runtime as an image: what `make venv` installs, for the pod execution mode
# (`airflow.execution: kubernetes`, airflow_tfx/pods.py). The same pins as the local venv
# (requirements/tfx.lock, synced with uv), the project installed at /opt/retrain, which is
# where the pods' commands find the configs, schemas and compiled DAG templates.
#
#   docker build -t registry.example/retrain-tfx:$(git rev-parse --short HEAD) .
#
# Build it from the same commit as the DAGs Airflow runs: prepare_run compares the
# pipeline code's fingerprint with the DAG's template and refuses a mismatch.
# GPU nodes: --build-arg BASE=<a CUDA 12.3 / cuDNN 8.9 runtime image> (TensorFlow 2.16's
# tested build); Python 3.10 is installed from the distribution when the base has none.
ARG BASE=python:3.10-slim-bookworm
FROM ${BASE}
ARG UV_VERSION=0.13.9

# UV_COMPILE_BYTECODE: the pods run as uid 1000, which cannot write __pycache__ under
# /opt/venv; without bytecode from the build, every pod compiles TensorFlow's and TFX's
# sources on import (about 10 s per task on 2 cores).
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_COMPILE_BYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN if ! command -v python3.10 >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends python3.10 python3.10-venv \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && python3.10 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir uv==${UV_VERSION}

WORKDIR /opt/retrain
# Dependencies first (their layer survives code changes), exactly the lock file's pins.
COPY requirements/tfx.lock requirements/tfx.lock
COPY requirements/tfx-nodeps.txt requirements/tfx-nodeps.txt
RUN uv pip sync --no-cache requirements/tfx.lock \
 && uv pip install --no-cache --no-deps -r requirements/tfx-nodeps.txt

# The project: packages, configs, curated schemas, compiled DAG templates, embedded data.
COPY setup.py pyproject.toml ./
COPY core core
COPY task_host task_host
COPY serving serving
COPY governance governance
COPY components components
COPY csv_engine csv_engine
COPY trainer_toolkit trainer_toolkit
COPY rollout rollout
COPY pipelines pipelines
COPY runner runner
COPY retrain retrain
COPY airflow_tfx airflow_tfx
COPY schemas schemas
COPY dags/compiled dags/compiled
COPY data data
RUN uv pip install --no-cache --no-deps -e . \
 && cyclonedx-py environment --output-reproducible --of JSON -o /opt/venv/retrain-runtime.cdx.json /opt/venv/bin/python \
 && python -c "import tfx, retrain.cli, task_host.pod" \
 && useradd --uid 1000 --no-create-home --home-dir /opt/retrain retrain

USER 1000
# Pods run `python -m task_host.pod -- <retrain command>` (the operator sets the command).
CMD ["python", "-m", "retrain.cli", "--help"]
