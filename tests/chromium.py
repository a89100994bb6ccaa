"""Load a page in headless Chromium (Debian's ``chromium`` package) and report what happened.

The page is served by a local ``http.server`` that records every request, so a test sees each
request the page makes (an image, a font, a fetch) and not only the ones a file:// load would
show. Chromium logs the page's console (including CSP violations) to stderr at INFO level with
``--enable-logging=stderr --log-level=0``; ``--dump-dom`` prints the DOM after load.

No browser is ever downloaded: without ``/usr/bin/chromium`` (or ``chromium`` on PATH) the tests
skip, except under CI (``CI=true``), where a missing browser fails them (``.ci/run`` installs it).
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio")
_CONSOLE = re.compile(r":(INFO|WARNING|ERROR|VERBOSE\d*):CONSOLE[^\]]*\] (.*)$")


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


def require_chromium() -> str:
    """The browser's path; skips the test without one (fails under CI, which must have it)."""
    path = chromium_path()
    if path is None:
        reason = "chromium not installed (apt-get install -y chromium); .ci/run installs it"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {reason}")
        pytest.skip(reason)
    return path


@dataclass(frozen=True)
class Loaded:
    dom: str  # the serialized DOM after load
    console: tuple[str, ...]  # console messages, CSP violations included
    requests: tuple[str, ...]  # paths the local server was asked for


class _Recorder(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.requests.append(self.path)
        super().do_GET()


def load(page: Path, *, window: str = "1280,2000", timeout: float = 90) -> Loaded:
    """Serve ``page``'s folder on 127.0.0.1, load the page in headless Chromium, return the DOM,
    the console and every request the server received."""
    browser = require_chromium()
    requests: list[str] = []
    handler = type("Handler", (_Recorder,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(page.parent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as profile:
            url = f"http://127.0.0.1:{server.server_address[1]}/{page.name}"
            run = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                                  "--log-level=0", f"--window-size={window}", "--virtual-time-budget=3000",
                                  "--dump-dom", url],
                                 capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert run.returncode == 0, run.stderr[-2000:]
    console = tuple(m.group(2) for line in run.stderr.splitlines() if (m := _CONSOLE.search(line)))
    return Loaded(run.stdout, console, tuple(requests))

