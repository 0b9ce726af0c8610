"""What the Airflow UI tests share: the REST API without a login (every user an admin) and
screenshots in headless Chromium, kept in test-artifacts/."""

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

from airflow_tfx.compiled_dag import REPO

ARTIFACTS = os.path.join(REPO, "test-artifacts")
# Every user is an admin: no login page to click through in a headless browser.
ALL_ADMINS = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, method: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(
        base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:  # say what the API objected to
        raise AssertionError(f"{method} {path}: HTTP {e.code}: {e.read()[:500]!r}") from e


def wait_for_dag(base: str, dag_id: str, timeout_s: float = 180) -> dict:
    """The DAG as the API shows it, once the dag-processor has parsed it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return api(base, "GET", f"/api/v2/dags/{dag_id}")
        except (OSError, AssertionError):  # not parsed yet (404), or not up
            assert time.monotonic() < deadline, f"DAG {dag_id} never appeared in the API"
            time.sleep(3)


def _chromium(profile: str, size: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", f"--window-size={size}", "--virtual-time-budget=20000", *args],
        check=True, timeout=180, capture_output=True, text=True,
    )


def rendered_text(url: str, profile: str, size: str = "1600,1000") -> str:
    """The page's DOM after its scripts ran (headless Chromium's --dump-dom), as text."""
    return _chromium(profile, size, "--dump-dom", url).stdout


def screenshot(url: str, name: str, profile: str, size: str = "1600,1000", shows: tuple[str, ...] = ()) -> str:
    """A headless Chromium screenshot of `url` in test-artifacts/NAME, after checking that the
    rendered page shows each of `shows` (its DOM, not the picture's size)."""
    if shows:
        dom = rendered_text(url, profile, size)
        missing = [text for text in shows if text not in dom]
        assert not missing, f"{url} rendered without {missing}: {dom[:2000]}"
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, name)
    if os.path.exists(shot):
        os.remove(shot)
    _chromium(profile, size, f"--screenshot={shot}", url)
    assert os.path.exists(shot), shot
    return shot
