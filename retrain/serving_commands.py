"""`retrain serve`, `retrain rollback`, `retrain serving-config`: the serving side of the CLI.

`retrain serve` is `python -m serving` with the pipeline's defaults (its model, its
workdir's models.config); the server itself lives in `serving/`.
"""

from __future__ import annotations

import argparse
import os
import sys

from core import exit_codes, layout
from core.errors import BadInput
from retrain import options


def add_parsers(sub) -> None:
    from serving.server import main as serving_main

    serve = sub.add_parser("serve", help="serve pushed models over TF Serving's REST and gRPC APIs")
    serve.add_argument("--config", default=options.DEFAULT_CONFIG, help="pipeline config (its model and workdir)")
    serve.add_argument("--workdir", default="work")
    serving_main.add_model_options(serve)
    serving_main.add_server_options(serve)

    rb = sub.add_parser("rollback", help="serve an earlier version (pins it in models.config; deletes nothing)")
    rb.add_argument("--model", required=True)
    rb.add_argument("--to", type=int, help="version to serve (default: the one before the served one)")
    rb.add_argument("--latest", action="store_true", help="undo a rollback: serve the latest version again")
    rb.add_argument("--reason", required=True, help="recorded in the model's history")
    rb.add_argument("--by", help="who decided, recorded in the history (default: RETRAIN_USER or the login)")
    rb.add_argument("--workdir", default="work")

    ver = sub.add_parser("verify", help="check pushed versions against their signatures (exit 1 if any fails)")
    ver.add_argument("--model", help="the model under <workdir>/serving/ (default: the pipeline's)")
    ver.add_argument("--version", type=int, help="one version (default: every version)")
    ver.add_argument("--path", help="a version folder anywhere, instead of --model/--version")
    ver.add_argument("--trusted-key", action="append", default=[], metavar="PUBLIC_KEY_PEM",
                     help="a signer's public key (repeatable; default: the pipeline's signing key)")
    ver.add_argument("--config", default=options.DEFAULT_CONFIG)
    ver.add_argument("--workdir", default="work")
    ver.add_argument("--json", action="store_true")

    cfg = sub.add_parser("serving-config", help="write TF Serving's models.config for the pushed models")
    cfg.add_argument("--workdir", default="work")
    cfg.add_argument("--base-path-prefix", help="where the serving folder is mounted, e.g. /models")
    cfg.add_argument("--out", help="default: stdout")


def _serving_root(args) -> str:
    return layout.serving_root(os.path.abspath(args.workdir))


def cmd_serve(args: argparse.Namespace) -> int:
    from core import logs
    from serving.repository import model_config, versions
    from serving.server import main as serving_main

    logs.configure(sys.stderr)
    if args.model_base_path or args.model_config_file:
        config, config_path = serving_main.model_config_from_args(args)
    else:
        pipeline = options.load_config(args.config)
        config_path = versions.config_path(_serving_root(args))
        if os.path.exists(config_path):
            config = model_config.load(config_path)
        else:
            # Written now, so a canary push (which edits models.config) keeps the request log
            # set here, and the server, which re-reads the file, sees the push's labels.
            config = versions.load_or_default(_serving_root(args), pipeline.model_name)
            os.makedirs(_serving_root(args), exist_ok=True)
            model_config.write(config, config_path)
        _request_log_defaults(args, pipeline, config, config_path)
        if args.request_log_max_age_days is None:
            args.request_log_max_age_days = pipeline.retention_settings.max_age_days
    if args.require_signed and not args.trusted_key:  # the key the pipeline's pushes are signed with
        from serving.repository import signing

        args.trusted_key = [signing.trusted_key_for(options.load_config(args.config).signing_key, args.workdir)]
    try:
        return serving_main.serve(args, config, config_path, prog="retrain serve")
    except OSError as e:  # e.g. the port is taken
        raise BadInput(str(e)) from e


def _request_log_defaults(args, pipeline, config, config_path: str | None) -> None:
    """The pipeline's model logs `request_log_sampling` of its requests where the skew check
    reads them (`layout.request_log_prefix`), unless models.config already says otherwise;
    written into models.config, which the server re-reads."""
    from serving.repository import model_config

    rate = pipeline.request_log_sampling if args.request_log_sampling_rate is None else args.request_log_sampling_rate
    model = model_config.find(config, pipeline.model_name)
    if not rate or model is None or model.HasField("logging_config"):
        return
    prefix = args.request_log_prefix or layout.request_log_prefix(os.path.abspath(args.workdir), pipeline.model_name)
    model_config.set_request_log(config, pipeline.model_name, rate, prefix)
    if config_path:
        model_config.write(config, config_path)


def cmd_rollback(args: argparse.Namespace) -> int:
    from serving.repository import versions

    if args.latest:
        entry = versions.release(_serving_root(args), args.model, args.reason, user=args.by)
    else:
        entry = versions.rollback(_serving_root(args), args.model, args.to, args.reason, user=args.by)
    sys.stdout.write(
        f"{args.model}: serving version {entry['to_version']} (was {entry['from_version']}); "
        f"recorded in {os.path.join(_serving_root(args), args.model, 'history.jsonl')}\n"
    )
    return exit_codes.OK


def cmd_verify(args: argparse.Namespace) -> int:
    import json

    from serving.repository import signing
    from serving.repository.base_path import discover

    trusted = args.trusted_key
    if not trusted:
        pipeline = options.load_config(args.config)
        trusted = [signing.trusted_key_for(pipeline.signing_key, args.workdir)]
    if args.path:
        if not os.path.isdir(args.path):
            raise BadInput(f"no folder {args.path}")
        folders = {os.path.basename(os.path.normpath(args.path)): args.path}
    else:
        model = args.model or options.load_config(args.config).model_name
        base = os.path.join(_serving_root(args), model)
        found = discover(base) if os.path.isdir(base) else {}
        if not found:
            raise BadInput(f"no versions of model {model!r} under {base}")
        if args.version is not None and args.version not in found:
            raise BadInput(f"version {args.version} of model {model!r} not found (versions: {sorted(found)})")
        folders = {str(v): p for v, p in sorted(found.items()) if args.version in (None, v)}
    results = []
    for version, folder in folders.items():
        try:
            info = signing.verify_version(folder, trusted)
            results.append({"version": version, "path": folder, "verified": True, **info})
        except signing.SignatureError as e:
            results.append({"version": version, "path": folder, "verified": False, "error": str(e)})
    if args.json:
        sys.stdout.write(json.dumps({"trusted_keys": trusted, "versions": results}, indent=2) + "\n")
    else:
        for r in results:
            if r["verified"]:
                report = " (and its governance report)" if r.get("report") else ""
                sys.stdout.write(f"{r['version']}: verified {r['digest']} over {r['files']} files{report}, "
                                 f"signer {r['key_id'][:16]}\n")
            else:
                sys.stdout.write(f"{r['version']}: REFUSED: {r['error']}\n")
    return exit_codes.OK if all(r["verified"] for r in results) else exit_codes.FAILED


def cmd_serving_config(args: argparse.Namespace) -> int:
    from serving.repository import model_config, versions

    root = _serving_root(args)
    if not os.path.isdir(root):
        raise BadInput(f"no serving folder {root} (nothing pushed yet?)")
    config = versions.production_config(root, args.base_path_prefix)
    if args.out:
        model_config.write(config, args.out)
        sys.stderr.write(f"wrote {args.out}\n")
    else:
        sys.stdout.write(model_config.dumps(config))
    return exit_codes.OK


COMMANDS = {"serve": cmd_serve, "rollback": cmd_rollback, "serving-config": cmd_serving_config, "verify": cmd_verify}
