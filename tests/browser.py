"""What the browser suites share: the OS's Chromium through Playwright, and JupyterLab servers on loopback.

Playwright cannot download its own browsers here: the suites launch the system's Chromium (``CHROMIUM`` or
``chromium`` on PATH). Without it they are skipped with the hint below (under ``CI=true`` they fail instead).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import BIN

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
HOW_TO_ENABLE = ("Chromium was not found. Install it from the OS packages (Debian/Ubuntu: "
                 "`sudo apt-get install chromium`) or set CHROMIUM=/path/to/chromium; `make test` then runs "
                 "the browser suite. CI installs it in .ci/run.")


def require_chromium() -> None:
    """Skip the calling module (fail under CI) when there is no Chromium."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            raise RuntimeError(HOW_TO_ENABLE)
        pytest.skip(HOW_TO_ENABLE, allow_module_level=True)


@contextmanager
def chromium():
    """One Chromium, with no background traffic: this machine's network is closed, and the pages must work
    without one."""
    from playwright.sync_api import sync_playwright

    quiet = ["--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--disable-quic", "--disable-gpu"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=quiet + (["--no-sandbox"] if os.getuid() == 0 else []))
        try:
            yield browser
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on loopback with a token, in its own process group, with a private home."""

    def __init__(self, home: Path, root: Path, user: str):
        self.token, self.port, self.root = secrets.token_hex(16), free_port(), root
        settings = home / "lab-settings"
        for name, value in {"notebook-extension/tracker": {"windowingMode": "none"},  # every cell in the DOM
                            "apputils-extension/notification": {"fetchNews": "false"},
                            # saves happen when a test presses Ctrl+S: an autosave (every 2 min) racing with it
                            # on a busy machine makes JupyterLab ask whether the file "changed on disk"
                            "docmanager-extension/plugin": {"autosave": False}}.items():
            path = settings / "@jupyterlab" / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        env.update(HOME=str(home), USER=user, LOGNAME=user, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                   JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
                   JUPYTER_CONFIG_DIR=str(home / ".jupyter"), JUPYTER_RUNTIME_DIR=str(home / "runtime"))
        self.log_path = home / f"lab-{user}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
             *(["--allow-root"] if os.getuid() == 0 else [])],
            cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(self.url("api/status"), timeout=2)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log_tail(3000)
                    self.stop()
                    raise RuntimeError(f"JupyterLab did not start: {tail}")
                time.sleep(0.5)

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path}{sep}token={self.token}"

    def log_tail(self, chars: int = 4000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server shuts its kernels down
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
