"""Writes the docs site's generated reference pages (never hand-copied):

    .venv/bin/python scripts/docs_reference.py OUT_DIR

- `cli.md`: every `retrain` command's `--help`, from the CLI's own parser (retrain/cli.py);
- `config.md`: every key of a pipeline config (pipelines/config/schema.py's PipelineConfig) with
  its type, default and the comment above it in the source, then each settings block's
  class the same way (pipelines/config/blocks.py: `trainer:`, `rollout:`, ... and the
  classes nested in them).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _field_comments(cls) -> dict[str, str]:
    """The `#` comment lines directly above each field of a dataclass, from its source. A
    field with none that directly follows another (no blank line) shares that one's: one
    comment above a group of related keys explains them all."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    out, previous = {}, None
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment, i = [], node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#"):
                comment.insert(0, lines[i].strip().lstrip("#").strip())
                i -= 1
            if not comment and previous is not None and previous.end_lineno == node.lineno - 1:
                out[node.target.id] = out[previous.target.id]
            else:
                out[node.target.id] = " ".join(comment)
            previous = node
        else:
            previous = None
    return out


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{field.default!r}`"
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
        return "its block's defaults" if dataclasses.is_dataclass(value) else f"`{value!r}`"
    return "required"


def _table(cls) -> list[str]:
    comments = _field_comments(cls)
    rows = ["| key | type | default | what it is |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        kind = (f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))).replace("|", "\\|")
        text = comments.get(f.name, "").replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{kind}` | {_default(f)} | {text} |".replace("`'", "`\"").replace("'`", "\"`"))
    return rows


def _nested(cls) -> list[tuple[str, type]]:
    """(field, settings class) for each field of `cls` that is itself a settings block
    (e.g. `airflow.kubernetes`, `model_card.owners`)."""
    import typing

    from core.settings import Settings

    out = []
    for name, hint in typing.get_type_hints(cls).items():
        for t in (hint, *typing.get_args(hint)):
            if isinstance(t, type) and issubclass(t, Settings):
                out.append((name, t))
    return out


def config_page() -> str:
    from pipelines import config

    out = ["# Pipeline config reference", "",
           "Generated from `pipelines/config/` (the schema, and each block's settings class in",
           "`pipelines/config/blocks.py`) by `scripts/docs_reference.py` (`make docs`): each key of a",
           "pipeline's `config.yaml`, its type and default, and the comment that explains it in the source.",
           "Relative paths are resolved against the config file's folder. `retrain run --set KEY=VALUE`",
           "overrides a key for one run.", "", "## Top-level keys", ""]
    out += _table(config.PipelineConfig)
    from pipelines import beam

    queue, done = [*config.BLOCKS.items(), ("beam", beam.BeamSettings)], set()
    while queue:
        block, cls = queue.pop(0)
        if cls in done:
            continue
        done.add(cls)
        queue[:0] = [(f"{block}.{name}", inner) for name, inner in _nested(cls)]
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
        if doc.startswith(f"{cls.__name__}("):  # dataclass's generated signature: no docstring
            doc = ""
        out += ["", f"## `{block}:` ({cls.__module__}.{cls.__name__})", "", doc, ""]
        out += _table(cls)
    return "\n".join(out) + "\n"


def cli_page() -> str:
    from retrain import cli

    parser = cli.parser()
    out = ["# `retrain` command reference", "",
           "Generated from the CLI's own parser (`retrain/cli.py`) by `scripts/docs_reference.py`.", "",
           "```text", parser.format_help().rstrip(), "```"]
    [sub] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for name, command in sorted(sub.choices.items()):
        out += ["", f"## `retrain {name}`", "", "```text", command.format_help().rstrip(), "```"]
        nested = [a for a in command._actions if a.__class__.__name__ == "_SubParsersAction"]
        for group in nested:
            for sub_name, sub_command in sorted(group.choices.items()):
                out += ["", f"### `retrain {name} {sub_name}`", "", "```text", sub_command.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    out_dir = argv[0] if argv else os.path.join(REPO, "docs", "reference")
    os.makedirs(out_dir, exist_ok=True)
    os.environ.setdefault("COLUMNS", "100")  # argparse wraps help at the terminal's width
    for name, page in (("cli.md", cli_page), ("config.md", config_page)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
