"""`retrain serve`, `retrain rollback`, `retrain serving-config`: the serving side of the CLI."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from retrain import exit_codes


def add_parsers(sub, default_config: str) -> None:
    serve = sub.add_parser("serve", help="serve pushed models over TF Serving's REST and gRPC APIs")
    serve.add_argument("--config", default=default_config, help="pipeline config (its model and workdir)")
    serve.add_argument("--workdir", default="work")
    serve.add_argument("--model-name", help="serve this model from --model-base-path instead")
    serve.add_argument("--model-base-path", help="folder of numeric version folders")
    serve.add_argument("--model-config-file", help="TF Serving models.config (default: <workdir>/serving/models.config if present)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--rest-port", type=int, default=8501)
    serve.add_argument("--grpc-port", type=int, default=8500)
    serve.add_argument("--poll-seconds", type=float, default=1.0)
    serve.add_argument("--max-batch-size", type=int, default=64)
    serve.add_argument("--batch-timeout-ms", type=float, default=2.0)
    serve.add_argument("--no-batching", action="store_true")
    serve.add_argument("--max-body-bytes", type=int, default=16 << 20)
    serve.add_argument("--port-file", help="write the chosen ports here (JSON) once serving")

    rb = sub.add_parser("rollback", help="serve an earlier version (pins it in models.config; deletes nothing)")
    rb.add_argument("--model", required=True)
    rb.add_argument("--to", type=int, help="version to serve (default: the one before the served one)")
    rb.add_argument("--latest", action="store_true", help="undo a rollback: serve the latest version again")
    rb.add_argument("--reason", required=True, help="recorded in the model's history")
    rb.add_argument("--workdir", default="work")

    cfg = sub.add_parser("serving-config", help="write TF Serving's models.config for the pushed models")
    cfg.add_argument("--workdir", default="work")
    cfg.add_argument("--base-path-prefix", help="where the serving folder is mounted, e.g. /models")
    cfg.add_argument("--out", help="default: stdout")


def _serving_root(args) -> str:
    return os.path.join(os.path.abspath(args.workdir), "serving")


def cmd_serve(args: argparse.Namespace) -> int:
    from pipelines import config as config_lib
    from serving import model_config, versions
    from serving.batching import BatchOptions
    from serving.errors import ServingError
    from serving.server import LocalModelServer, ServerOptions

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    config_path = None
    try:
        if args.model_base_path:
            if not args.model_name:
                raise ServingError("--model-base-path needs --model-name")
            config = model_config.single_model(args.model_name, args.model_base_path)
        else:
            config_path = args.model_config_file or versions.config_path(_serving_root(args))
            if os.path.exists(config_path):
                config = model_config.load(config_path)
            else:
                name = config_lib.load(args.config).model_name
                config_path = None
                config = versions.load_or_default(_serving_root(args), name)
        options = ServerOptions(
            host=args.host, rest_port=args.rest_port, grpc_port=args.grpc_port, poll_seconds=args.poll_seconds,
            max_body_bytes=args.max_body_bytes, port_file=args.port_file,
            batch=BatchOptions(args.max_batch_size, args.batch_timeout_ms, not args.no_batching),
        )
        server = LocalModelServer(config, options, config_path)
    except (ServingError, config_lib.ConfigError, OSError) as e:
        sys.stderr.write(f"retrain serve: {e}\n")
        return exit_codes.BAD_INPUT
    server.start()
    for m in config.model_config_list.config:
        sys.stderr.write(f"retrain serve: {m.name} from {m.base_path}: versions {server.manager.served_versions(m.name)}\n")
    sys.stderr.write(f"retrain serve: REST http://{args.host}:{server.rest_port}/v1/models/<name>, gRPC {args.host}:{server.grpc_port}\n")
    server.wait()
    return exit_codes.OK


def cmd_rollback(args: argparse.Namespace) -> int:
    from serving import versions
    from serving.errors import ServingError

    try:
        if args.latest:
            entry = versions.release(_serving_root(args), args.model, args.reason)
        else:
            entry = versions.rollback(_serving_root(args), args.model, args.to, args.reason)
    except ServingError as e:
        sys.stderr.write(f"retrain rollback: {e}\n")
        return exit_codes.BAD_INPUT
    sys.stdout.write(
        f"{args.model}: serving version {entry['to_version']} (was {entry['from_version']}); "
        f"recorded in {os.path.join(_serving_root(args), args.model, 'history.jsonl')}\n"
    )
    return exit_codes.OK


def cmd_serving_config(args: argparse.Namespace) -> int:
    from serving import model_config, versions

    root = _serving_root(args)
    if not os.path.isdir(root):
        sys.stderr.write(f"retrain serving-config: no serving folder {root} (nothing pushed yet?)\n")
        return exit_codes.BAD_INPUT
    config = versions.production_config(root, args.base_path_prefix)
    if args.out:
        model_config.write(config, args.out)
        sys.stderr.write(f"wrote {args.out}\n")
    else:
        sys.stdout.write(model_config.dumps(config))
    return exit_codes.OK


COMMANDS = {"serve": cmd_serve, "rollback": cmd_rollback, "serving-config": cmd_serving_config}
