"""`retrain`: run the retraining pipeline locally, or one step of it for an orchestrator.

    retrain run [--span 201612] [--window 6] [--json]   the whole pipeline, local runner
    retrain compile --out dags/compiled/taxi.json       the DAG template an orchestrator reads
    retrain prepare-run --run-id ID [--span S]          check inputs, backfill, bind the IR
    retrain node run --run-dir DIR --node NODE_ID       run one node of a prepared run
    retrain summary --run-dir DIR [--json]              a prepared run's summary
    retrain schema infer --out schemas/x/schema.pbtxt   bootstrap a schema to curate
    retrain schema calibrate [--spans A..B]             the data gate's limits from the spans' history
    retrain spans                                       list the spans in the data folder
    retrain new NAME --data DIR --label COL [--task T]  a pipeline of your own from a folder of spans
    retrain sample-spans --dataset diabetes --out DIR   monthly spans of a dataset bundled with scikit-learn
    retrain scale-spans --rows 10000000 --out DIR       taxi-like months of any size (runs at real volumes)
    retrain quarantine --pipeline taxi --span S --reason R   take a span out of training
    retrain serve [--rest-port 8501 --grpc-port 8500]   serve pushed models (TF Serving's APIs)
    retrain rollback --model taxi [--to V] --reason R   serve an earlier version
    retrain serving-config [--base-path-prefix /models] TF Serving's models.config
    retrain rollout status|decide|promote|rollback      the canary under test, decided by delayed labels
    retrain rollout simulate --span S [--requests N]    a span's examples as keyed requests, and their labels
    retrain report --run-dir DIR                        a run's governance report (HTML + JSON)
    retrain models [--config C]                         every candidate model, with report links
    retrain view --pipeline taxi                        what the Models view in Airflow shows (JSON)
    retrain lineage taxi VERSION                        data span -> served version
    retrain approve --model-id N --decision approve     a reviewer's decision before push
    retrain scorecard [--explain data.5]                the ML Test Score, each point from a check that ran
    retrain attest --test data.6 --by N --evidence E --expires D   a test done by hand, attested

Exit codes: 0 done (pushed, not blessed, cached or skipped); 1 a node failed; 2 bad input
(nothing was written); 3 the data gate stopped the span; 4 awaiting a reviewer's approval.

This module only parses arguments and dispatches; the commands live in
`retrain/*_commands.py`, the work below them (`runner/`, `governance/`, `serving/`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from core import (
    exit_codes,
    keras_env,  # noqa: F401  (must precede any TensorFlow import)
)
from core.errors import BadInput
from retrain import (
    data_commands,
    governance_commands,
    new_commands,
    rollout_commands,
    run_commands,
    serving_commands,
)

_MODULES = (run_commands, data_commands, new_commands, governance_commands, serving_commands, rollout_commands)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for module in _MODULES:
        module.add_parsers(sub)
    return p


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean "bad input, nothing written" (exit 2), wherever they are raised."""
    from serving.errors import ServingError  # a models.config or version the server refuses

    return (BadInput, ServingError)


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit code (the console entry point exits with it)."""
    args = parser().parse_args(argv)
    handler = {name: fn for module in _MODULES for name, fn in module.COMMANDS.items()}[args.command]
    try:
        return handler(args)
    except _bad_input_errors() as e:
        sys.stderr.write(f"retrain {args.command}: {e}\n")
        return exit_codes.BAD_INPUT


def entry_point(argv: list[str] | None = None) -> None:
    """The `retrain` console script, `python -m retrain.cli` and the warm runtime's commands."""
    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # `retrain spans | head`: the reader has gone, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = exit_codes.OK
    sys.stderr.flush()
    logging.shutdown()
    # TensorFlow's interpreter-exit finalizers print spurious tracebacks; the work is done.
    os._exit(code)


if __name__ == "__main__":
    entry_point()
