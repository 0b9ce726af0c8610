"""What the Airflow UI tests share: the REST API (without a login where every user is an
admin, else with a user's token from `login`), and headless Chromium: `screenshot` from the
command line, or `Browser` (Chrome's DevTools protocol) for a logged-in session; screenshots
are kept in test-artifacts/."""

import base64
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
# API tokens by server (`login`): `api` sends the one its server has.
_TOKENS: dict[str, str] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def login(base: str, user: str, password: str, remember: bool = True) -> str:
    """A JWT for `user` from the simple auth manager (`POST /auth/token`); with `remember`,
    `api` uses it for every later call to this server."""
    req = urllib.request.Request(base + "/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"username": user, "password": password}).encode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        token = json.loads(resp.read())["access_token"]
    if remember:
        _TOKENS[base] = token
    return token


def api(base: str, method: str, path: str, body: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if base in _TOKENS:
        headers["Authorization"] = f"Bearer {_TOKENS[base]}"
    req = urllib.request.Request(
        base + path, method=method, data=json.dumps(body).encode() if body is not None else None, headers=headers,
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


class Browser:
    """Headless Chromium driven over Chrome's DevTools protocol: a session that carries the
    UI's login cookie, waits for what a page must show (its text, frames included) and
    takes screenshots of what it shows."""

    def __init__(self, profile: str, size: tuple[int, int] = (1600, 1000)):
        import websocket  # websocket-client, in the Airflow control plane's lock

        from tests.waiting import until

        port_file = os.path.join(profile, "DevToolsActivePort")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.proc = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = until(lambda: os.path.exists(port_file) and open(port_file).read().split("\n")[0].strip(), 60,
                     "Chromium's DevTools port")
        pages = until(lambda: [t for t in json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                                                             timeout=5).read())
                               if t.get("type") == "page"], 30, "a Chromium page", ignore=(OSError,))
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self._id = 0
        self.send("Page.enable")
        self.send("Network.enable")

    def send(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message.get("result", {})

    def set_cookie(self, base: str, name: str, value: str) -> None:
        self.send("Network.setCookie", name=name, value=value, url=base + "/")

    def text(self) -> str:
        """The page's visible text and that of its same-origin frames (plugin views are iframes)."""
        script = ("(() => { const out = [document.body ? document.body.innerText : ''];"
                  " for (const f of document.querySelectorAll('iframe')) { try {"
                  " out.push(f.contentDocument.body.innerText); } catch (e) {} } return out.join('\\n'); })()")
        return self.send("Runtime.evaluate", expression=script, returnByValue=True)["result"].get("value") or ""

    def open(self, url: str, shows: tuple[str, ...] = (), seconds: float = 90) -> str:
        """Navigates to `url` and waits until its text shows each of `shows`; returns the text."""
        from tests.waiting import until

        self.send("Page.navigate", url=url)
        try:
            return until(lambda: (lambda t: t if all(s in t for s in shows) and t.strip() else None)(self.text()),
                         seconds, f"{url} showing {shows}")
        except AssertionError as e:
            raise AssertionError(f"{e}; it shows: {self.text()[:2000]!r}") from None

    def screenshot(self, name: str) -> str:
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, name)
        with open(shot, "wb") as f:
            f.write(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return shot

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=30)
