"""AtomicPusher's push: a version directory is complete whenever it is visible."""

import os
import threading

import pytest

from components.atomic_pusher import executor


def _model(tmp_path, files: int = 200):
    src = tmp_path / "model"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"x" * 1000)
    for i in range(files):
        (src / "variables" / f"shard-{i}").write_bytes(os.urandom(2000))
    return src


def test_version_appears_complete_to_a_polling_watcher(tmp_path):
    src = _model(tmp_path)
    expected = sorted(os.listdir(src / "variables"))
    base = tmp_path / "serving" / "m"
    seen_partial = []
    done = threading.Event()

    def watch():  # what TF Serving does: poll for numeric directories and load them
        while not done.is_set():
            for v in executor.existing_versions(str(base)):
                vdir = base / str(v)
                try:
                    files = sorted(os.listdir(vdir / "variables"))
                    complete = (vdir / "saved_model.pb").exists() and files == expected
                except FileNotFoundError:
                    complete = False
                if not complete:
                    seen_partial.append(v)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        versions = []
        for i in range(5):
            v = executor.next_version(str(base), now=1000)
            executor.atomic_copy_dir(str(src), str(base), v, {"model_uri": f"m{i}"})
            versions.append(v)
    finally:
        done.set()
        watcher.join()
    assert versions == [1000, 1001, 1002, 1003, 1004]  # versions only grow
    assert seen_partial == []
    assert not [n for n in os.listdir(base) if n.startswith(".staging")]


def test_existing_version_is_never_overwritten(tmp_path):
    src = _model(tmp_path, files=1)
    base = tmp_path / "serving"
    executor.atomic_copy_dir(str(src), str(base), 7)
    (base / "7" / "saved_model.pb").write_bytes(b"served")
    with pytest.raises(FileExistsError):
        executor.atomic_copy_dir(str(src), str(base), 7)
    assert (base / "7" / "saved_model.pb").read_bytes() == b"served"


def test_push_info_identifies_the_model(tmp_path):
    src = _model(tmp_path, files=1)
    base = tmp_path / "serving"
    executor.atomic_copy_dir(str(src), str(base), 5, {"model_uri": "/models/a"})
    executor.atomic_copy_dir(str(src), str(base), 6, {"model_uri": "/models/b"})
    assert executor.version_pushed_from(str(base), "/models/a") == 5
    assert executor.version_pushed_from(str(base), "/models/c") is None
