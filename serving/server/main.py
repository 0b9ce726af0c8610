"""The model server's own entry point: `python -m serving --model-name M --model-base-path P`
or `--model-config-file models.config`, like `tensorflow_model_server`.

`retrain serve` adds the pipeline's defaults (its model and workdir) and calls `serve`;
the pre-push serving check starts this entry point as a subprocess.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from core import (
    exit_codes,
    keras_env,  # noqa: F401  (before TensorFlow: the same Keras as training)
    logs,
)
from core.errors import BadInput

logger = logging.getLogger(__name__)


def _int_at_least(low: int):
    """An argparse type: an integer of at least `low`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more; was {value}")
        return value

    parse.__name__ = f"integer >= {low}"  # argparse names the type in its error
    return parse


def add_server_options(p: argparse.ArgumentParser) -> None:
    """Network, polling, batching and size options shared with `retrain serve`."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--rest-port", type=int, default=8501)
    p.add_argument("--grpc-port", type=int, default=8500)
    p.add_argument("--poll-seconds", type=float, default=1.0)
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--batch-timeout-ms", type=float, default=2.0)
    p.add_argument("--num-batch-threads", type=_int_at_least(1), default=1,
                   help="batches run at once (TF Serving's num_batch_threads; up to the cores the server has to itself)")
    p.add_argument("--no-batching", action="store_true")
    # TF Serving's flags (its underscore spelling is accepted too). 0 is TF Serving's meaning:
    # TensorFlow picks (one thread per core).
    for kind in ("intra", "inter"):
        p.add_argument(f"--tensorflow-{kind}-op-parallelism", f"--tensorflow_{kind}_op_parallelism",
                       dest=f"tensorflow_{kind}_op_parallelism", type=_int_at_least(0), default=0,
                       help=f"TensorFlow's {kind}-op threads (default 0: TensorFlow picks, one per core)")
    p.add_argument("--grpc-processes", type=_int_at_least(1), default=1,
                   help="gRPC front-end processes, each with an interpreter of its own, sharing --grpc-port "
                        "(default 1; more only where gRPC's own cost, ~0.2 ms of CPU per call, fills a core)")
    p.add_argument("--max-body-bytes", type=int, default=16 << 20)
    p.add_argument("--port-file", help="write the chosen ports here (JSON) once serving")
    p.add_argument("--require-signed", action="store_true",
                   help="load only versions signed by a --trusted-key (unsigned or tampered ones are refused; "
                        "the previous version keeps serving)")
    p.add_argument("--trusted-key", action="append", default=[], metavar="PUBLIC_KEY_PEM",
                   help="a signer's public key (repeatable); `retrain serve` defaults to the pipeline's key")
    p.add_argument("--request-log-max-file-bytes", type=int, default=16 << 20,
                   help="a request log file is closed (and a new one started) past this size")
    p.add_argument("--request-log-max-files", type=int, default=8, help="finished log files kept per model")
    p.add_argument("--request-log-max-file-seconds", type=float, default=300.0,
                   help="a request log file is closed after this long, so readers see recent traffic")
    p.add_argument("--request-log-max-age-days", type=float, default=None,
                   help="retention: finished request log files older than this are deleted, each deletion logged"
                        " (`retrain serve --config` takes the pipeline's retention.max_age_days)")


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-name", help="serve this model from --model-base-path")
    p.add_argument("--model-base-path", help="folder of numeric version folders")
    p.add_argument("--model-config-file", help="TF Serving models.config (its logging_config turns request logs on)")
    p.add_argument("--request-log-sampling-rate", type=float,
                   help="log this share of --model-name's requests (TF Serving's LoggingConfig)")
    p.add_argument("--request-log-prefix", help="request log files: <prefix>.<ms>.<n>.tfrecord")


def serve(args: argparse.Namespace, config, config_path: str | None = None, prog: str = "serving") -> int:
    """Starts REST and gRPC for `config` and serves until stopped.

    Raises:
      serving.errors.ServingError, OSError: the server cannot start (a port, a config).
    """
    server = build_server(args, config, config_path)
    server.start()
    for m in config.model_config_list.config:
        sys.stderr.write(f"{prog}: {m.name} from {m.base_path}: versions {server.manager.served_versions(m.name)}\n")
    sys.stderr.write(f"{prog}: REST http://{args.host}:{server.rest_port}/v1/models/<name>, gRPC {args.host}:{server.grpc_port}\n")
    server.wait()
    return exit_codes.OK


def build_server(args: argparse.Namespace, config, config_path: str | None = None):
    """The server the parsed options describe, not started yet (`serve` starts it and waits;
    the tests start one in their own process where no process boundary is under test).

    Raises:
      serving.errors.ServingError, OSError: the options or the config are not usable.
    """
    from serving.repository.signing import SigningKeyError
    from serving.server.batching import BatchOptions
    from serving.server.model_server import LocalModelServer, ServerOptions
    from serving.server.request_log import LogLimits

    if args.require_signed and not args.trusted_key:
        raise SigningKeyError("--require-signed needs at least one --trusted-key")
    if args.trusted_key and not args.require_signed:
        raise SigningKeyError("--trusted-key is used only with --require-signed")
    for key in args.trusted_key:
        if not os.path.isfile(key):
            raise SigningKeyError(f"trusted key {key} not found")
    options = ServerOptions(
        host=args.host, rest_port=args.rest_port, grpc_port=args.grpc_port, poll_seconds=args.poll_seconds,
        max_body_bytes=args.max_body_bytes, port_file=args.port_file,
        batch=BatchOptions(args.max_batch_size, args.batch_timeout_ms, not args.no_batching, args.num_batch_threads),
        log_limits=LogLimits(args.request_log_max_file_bytes, args.request_log_max_files,
                             args.request_log_max_file_seconds, max_age_days=args.request_log_max_age_days),
        trusted_keys=tuple(os.path.abspath(k) for k in args.trusted_key),
        intra_op_threads=args.tensorflow_intra_op_parallelism,
        inter_op_threads=args.tensorflow_inter_op_parallelism,
        grpc_processes=args.grpc_processes,
    )
    return LocalModelServer(config, options, config_path)


def model_config_from_args(args: argparse.Namespace):
    """(config, config path or None) from --model-name/--model-base-path or --model-config-file.

    Raises:
      serving.errors.InvalidArgument: neither, or a name without a path.
    """
    from serving.errors import InvalidArgument
    from serving.repository import model_config

    if args.model_base_path:
        if not args.model_name:
            raise InvalidArgument("--model-base-path needs --model-name")
        config = model_config.single_model(args.model_name, args.model_base_path)
        if args.request_log_sampling_rate:
            if not args.request_log_prefix:
                raise InvalidArgument("--request-log-sampling-rate needs --request-log-prefix")
            model_config.set_request_log(config, args.model_name, args.request_log_sampling_rate,
                                         args.request_log_prefix)
        return config, None
    if args.model_config_file:
        return model_config.load(args.model_config_file), args.model_config_file
    raise InvalidArgument("give --model-name and --model-base-path, or --model-config-file")


def parser() -> argparse.ArgumentParser:
    """`python -m serving`'s options: the model and the server's."""
    p = argparse.ArgumentParser(prog="python -m serving", description=__doc__.split("\n")[0])
    add_model_options(p)
    add_server_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    from serving.errors import ServingError

    args = parser().parse_args(argv)
    logs.configure(sys.stderr)
    try:
        config, config_path = model_config_from_args(args)
        return serve(args, config, config_path)
    except (ServingError, OSError, BadInput) as e:
        sys.stderr.write(f"serving: {e}\n")
        return exit_codes.BAD_INPUT
