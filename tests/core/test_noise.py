import logging
import os
import subprocess
import sys
import warnings

from core import noise

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


LISTED = ("A library warning nobody can act on", FutureWarning, "listed for this test")


def test_listed_library_noise_is_dropped_and_everything_else_shows(caplog, monkeypatch):
    monkeypatch.setattr(noise, "WARNINGS", (LISTED,))
    monkeypatch.setenv("PYTHONWARNINGS", "")
    noise.quiet_third_party()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        noise.quiet_third_party()  # again: catch_warnings reset the filters; idempotent
        warnings.warn("A library warning nobody can act on (details)", FutureWarning)
        warnings.warn("retrain: our own future warning", FutureWarning)
    assert [str(w.message) for w in caught] == ["retrain: our own future warning"]
    with caplog.at_level(logging.WARNING, logger="tensorflow"):  # whatever level an earlier test left
        tf = logging.getLogger("tensorflow")
        tf.warning("From x.py:93: tf_record_iterator (from tf) is deprecated and will be removed in a future version.")
        tf.warning("a TensorFlow warning that is not a deprecation")
        tf.error("an error that mentions is deprecated and will be removed")
    assert [r.getMessage() for r in caplog.records] == [
        "a TensorFlow warning that is not a deprecation", "an error that mentions is deprecated and will be removed"]
    with caplog.at_level(logging.WARNING, logger="absl"):
        caplog.clear()
        logging.getLogger("absl").warning("Fallback to non-ZetaSQL contexts execution query due to: x")
        logging.getLogger("absl").warning("an absl warning we keep")
    assert [r.getMessage() for r in caplog.records] == ["an absl warning we keep"]


def test_child_interpreters_inherit_the_warning_filters():
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    code = ("import os, warnings; from core import noise;"
            f" noise.WARNINGS = ({LISTED[0]!r}, FutureWarning, 'x'),; noise.quiet_third_party(); import subprocess, sys;"
            "print(subprocess.run([sys.executable, '-c', \"import warnings; warnings.warn("
            f"'{LISTED[0]} x', FutureWarning); warnings.warn('kept', FutureWarning)\"],"
            " capture_output=True, text=True).stderr)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert "kept" in out.stdout and "nobody can act on" not in out.stdout
