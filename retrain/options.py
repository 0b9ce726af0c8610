"""Options and terminal helpers that several `retrain` commands share."""

from __future__ import annotations

import argparse
import os
import sys

from core import project

REPO = project.ROOT
DEFAULT_CONFIG = os.path.join(REPO, "pipelines", "taxi", "config.yaml")
_OVERRIDABLE = ("window_spans", "eval_steps")
# One training budget: the one given on the command line replaces the config's.
_BUDGETS = ("train_epochs", "train_examples", "train_steps")


def pipeline_config_path(pipeline: str) -> str:
    """`pipelines/<name>/config.yaml` of this checkout."""
    return os.path.join(REPO, "pipelines", pipeline, "config.yaml")


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=DEFAULT_CONFIG, help="pipeline config YAML")
    p.add_argument("--span", help="span to ingest, YYYYMM (default: the latest)")
    p.add_argument("--window", type=int, dest="window_spans", help="spans to train on")
    p.add_argument("--train-steps", type=int, dest="train_steps", help="train this many steps")
    p.add_argument("--train-epochs", type=float, dest="train_epochs",
                   help="train this many passes over the window's training split (up to max_train_examples)")
    p.add_argument("--train-examples", type=int, dest="train_examples", help="train on this many examples")
    p.add_argument("--eval-steps", type=int, dest="eval_steps")
    p.add_argument("--workdir", default="work", help="outputs, MLMD and serving dir (default ./work)")
    p.add_argument("--data-root", dest="data_root", help="span folders (default: from config)")
    p.add_argument("--beam-profile", dest="beam_profile", metavar="PROFILE",
                   help="Beam runner profile of every Beam node: auto, direct, direct-multiprocess, portable, flink,"
                        " spark or dataflow (its options from the config's beam.options or --set)")
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, dotted for nested ones, the value read as YAML"
                        " (e.g. --set ingestion.engine=beam --set hparams.batch_size=256); repeatable")
    p.add_argument("--no-cache", action="store_true", help="re-run nodes whose inputs are unchanged")
    p.add_argument("--no-backfill", action="store_true", help="don't ingest missing window spans first")


def add_run_dir_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", help="the run folder prepare-run wrote")
    p.add_argument("--workdir", help="with --pipeline and --run-id, instead of --run-dir")
    p.add_argument("--pipeline", help="with --workdir: the pipeline name")
    p.add_argument("--run-id", help="with --workdir: the orchestrator's run id")


def run_folder(args) -> str:
    """The prepared run's folder from the run-dir options.

    Raises:
      core.run_folder.NoRunFolder: none given, or no prepared run there (exit 2).
    """
    from core import run_folder as run_folder_lib

    return run_folder_lib.locate(args.run_dir, args.workdir, args.pipeline, args.run_id)


def overrides(args) -> dict:
    """Config values the run options override (None: keep the config's)."""
    from pipelines import config as config_lib

    out = {k: getattr(args, k) for k in _OVERRIDABLE}
    out.update(config_lib.parse_assignments(args.assignments))
    given = [k for k in _BUDGETS if getattr(args, k, None) is not None]
    if given:
        out.update({k: config_lib.CLEAR for k in _BUDGETS})
        out.update({k: getattr(args, k) for k in given})
    if args.beam_profile:
        out["beam.profile"] = args.beam_profile
    if args.data_root:
        out["data_root"] = os.path.abspath(args.data_root)
    out["workdir"] = os.path.abspath(args.workdir)
    if args.no_cache:
        out["enable_cache"] = False
    if args.no_backfill:
        out["backfill_window"] = False
    return out


def load_config(path: str, workdir: str | None = None, data_root: str | None = None):
    """A pipeline config with the workdir/data root given on the command line.

    Raises:
      pipelines.config.ConfigError: naming the field (exit 2).
    """
    from pipelines import config as config_lib

    given = {"workdir": os.path.abspath(workdir) if workdir else None,
             "data_root": os.path.abspath(data_root) if data_root else None}
    return config_lib.load(path, given)


def progress(stream=sys.stderr):
    """(on_start, on_end) callbacks that print one line per node, with the cause of a failure."""

    def on_start(i: int, n: int, node_id: str) -> None:
        stream.write(f"[{i:>2}/{n}] {node_id:<32}")
        stream.flush()

    def on_end(i: int, n: int, result) -> None:
        stream.write(f" {result.status:<9}{result.seconds:7.1f}s\n")
        if result.status == "failed" and result.error:  # the cause, not only "failed"
            stream.write(f"        {result.error}\n")
        stream.flush()

    return on_start, on_end


def say(stream=sys.stderr):
    """A one-argument logger for progress messages."""
    return lambda message: (stream.write(message + "\n"), stream.flush())
