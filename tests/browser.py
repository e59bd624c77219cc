"""What the browser suites share: the OS's Chromium through Playwright, and JupyterLab servers on loopback.

Playwright cannot download its own browsers here: the suites launch the system's Chromium, two builds of it from
Debian's packages. The workflows a student and an instructor go through in JupyterLab (test_browser.py) run in the
browser itself (``chromium``: :data:`BROWSER`). What only reads a page's content (the axe audits, reflow, the
keyboard, payloads left inert) runs in Chromium's headless shell where it is installed (``chromium-headless-shell``:
:data:`AUDITOR`), the build Playwright itself runs headless: the same Blink and V8 without the browser's own layer
(profiles, the browser process's services), so a page costs less CPU: the audit of the two similarity pages took 17.3
to 17.7 core-seconds with it against 26.8 to 27.1 with ``chromium`` (docs/testing.md). Each falls back on the other;
``CHROMIUM=/path`` sets both (``CHROMIUM=/usr/bin/chromium make test`` audits in the full browser too). Without
either they are skipped with the hint below (under ``CI=true`` they fail instead); .ci/run installs both.
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

def _chromium(*names: str) -> str | None:
    """``CHROMIUM`` if set, else the first of ``names`` on PATH."""
    return os.environ.get("CHROMIUM") or next((path for path in map(shutil.which, names) if path), None)


#: The browser a student or an instructor opens JupyterLab in (test_browser.py).
BROWSER = _chromium("chromium", "chromium-browser", "chromium-headless-shell")
#: What audits the course's pages (axe, reflow, the keyboard, inert payloads): the headless shell where installed.
AUDITOR = _chromium("chromium-headless-shell", "chromium", "chromium-browser")
#: axe-core, pinned in tests/axe/package.json (``make install`` runs ``npm ci`` there)
AXE = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
#: The rules of the audit: WCAG 2.0 and 2.1, levels A and AA
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
HOW_TO_ENABLE = ("Chromium was not found. Install it from the OS packages (Debian: `sudo apt-get install chromium "
                 "chromium-headless-shell`) or set CHROMIUM=/path/to/chromium; `make test` then runs the browser "
                 "suites. CI installs both in .ci/run.")


def require_chromium() -> None:
    """Skip the calling module (fail under CI) when there is no Chromium."""
    if BROWSER is None:
        if os.environ.get("CI"):
            raise RuntimeError(HOW_TO_ENABLE)
        pytest.skip(HOW_TO_ENABLE, allow_module_level=True)


@contextmanager
def chromium(workflow: bool = False):
    """One Chromium, with no background traffic: this machine's network is closed, and the pages must work
    without one. ``workflow``: the browser itself (:data:`BROWSER`), for JupyterLab as a person uses it; otherwise
    the page auditor (:data:`AUDITOR`)."""
    from playwright.sync_api import sync_playwright

    quiet = ["--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--disable-quic", "--disable-gpu"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER if workflow else AUDITOR,
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


#: Evaluated in a page: text whose box is wider than the screen, or that scrolls sideways inside its box
#: (WCAG 1.4.10 asks for none at 320 CSS px). Formulas are two-dimensional content, which 1.4.10 exempts: a wide
#: one may scroll in its own box.
REFLOW = """() => {
  const width = document.documentElement.clientWidth, found = [];
  if (document.documentElement.scrollWidth > width + 1) found.push(`page ${document.documentElement.scrollWidth}px`);
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('math')) continue;
    const style = getComputedStyle(el);
    if (style.display === 'none' || !el.textContent.trim()) continue;
    if (el.scrollWidth > el.clientWidth + 1 && /auto|scroll/.test(style.overflowX))
      found.push(`${el.tagName}.${el.className} scrolls ${el.scrollWidth}px in ${el.clientWidth}px`);
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 1 && el.children.length === 0)
      found.push(`${el.tagName}.${el.className} ends at ${Math.round(box.right)}px`);
  }
  return found.slice(0, 8);
}"""


def require_axe() -> None:
    """Skip the calling module (fail under CI) when axe-core is not installed."""
    require_chromium()
    if not AXE.is_file():
        hint = "axe-core is not installed: run `make install` (npm ci in tests/axe; needs Node.js and npm)."
        if os.environ.get("CI"):
            raise RuntimeError(hint)
        pytest.skip(hint, allow_module_level=True)


def audit(page) -> list[dict]:
    """axe-core's WCAG 2.0/2.1 A and AA violations on the page loaded in ``page`` (a Playwright page whose
    context was made with ``bypass_csp=True``: the course's pages allow no script, axe's included), each as
    ``{"id", "impact", "help", "nodes": [selector, ...]}``."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async (tags) => {
        const result = await axe.run(document, {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]});
        return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                            nodes: v.nodes.map(n => n.target.join(" "))}));
    }""", WCAG_AA)
    return found


def describe_violations(found: list[dict], limit: int = 3) -> str:
    """One line per violated rule: its id, impact, how many elements, and the first few of them."""
    return "\n".join(f"{v['id']} ({v['impact']}, {len(v['nodes'])} elements: {', '.join(v['nodes'][:limit])}): "
                     f"{v['help']}" for v in found)


def wcag_failures(browser, pages: dict) -> dict[str, str]:
    """``name -> what fails`` for each page (``name -> path``): axe-core's WCAG 2.1 AA audit and text wider than its
    box at 1280 CSS px, and the reflow at 320 CSS px (WCAG 1.4.10). Pages that pass are left out."""
    failed = {}
    for name, path in pages.items():
        text = Path(path).read_text(encoding="utf-8")
        problems = [f"{what} missing" for what, ok in (("lang", 'lang="en"' in text), ("no script", "<script" not in text))
                    if not ok]
        for viewport in ({"width": 1280, "height": 900}, {"width": 320, "height": 640}):
            ctx = browser.new_context(bypass_csp=True, viewport=viewport)
            try:
                page = ctx.new_page()
                page.goto(Path(path).as_uri())
                found = audit(page) if viewport["width"] > 320 else []
                wide = page.evaluate(REFLOW)
            finally:
                ctx.close()
            if found:
                problems.append(describe_violations(found))
            if wide:
                problems.append(f"text wider than its box at {viewport['width']} px: {wide}")
        if problems:
            failed[name] = "\n".join(problems)
    return failed
