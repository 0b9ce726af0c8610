"""The docs site builds in strict mode from the generated reference pages, and strict mode
fails on a broken link (so a page or link that goes stale fails the suite)."""

import os
import shutil
import subprocess

from tests.conftest import REPO


def test_the_site_builds_strictly_with_the_generated_reference(tmp_path):
    proc = subprocess.run(["make", "--no-print-directory", "docs"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    config = open(os.path.join(REPO, "site", "reference", "config", "index.html"), encoding="utf-8").read()
    # Generated from the typed config: a key and the comment above it in pipelines/config/schema.py.
    assert "window_spans" in config and "How many monthly spans" in config
    cli = open(os.path.join(REPO, "site", "reference", "cli", "index.html"), encoding="utf-8").read()
    assert "retrain rollout" in cli and "--reason" in cli


def test_a_broken_link_fails_the_strict_build(tmp_path):
    shutil.copy(os.path.join(REPO, "mkdocs.yml"), tmp_path / "mkdocs.yml")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](nowhere.md).\n")
    config = (tmp_path / "mkdocs.yml").read_text().split("\nnav:")[0]  # the project's settings, not its pages
    (tmp_path / "mkdocs.yml").write_text(config + "\n")
    proc = subprocess.run([os.path.join(REPO, ".venv-docs", "bin", "mkdocs"), "build", "--strict"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode != 0 and "nowhere.md" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
