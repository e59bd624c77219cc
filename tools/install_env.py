"""``make install``: the course's ``.venv`` from ``requirements.txt``, whole or not at all.

Run by the Python the environment is made from (``PYTHON=``, default ``python3.11``), with its standard library only:

* it says at once when that Python is one the course does not support (README, "Which Python");
* PyTorch comes from the PyTorch project's CPU index on Linux and Windows (``requirements.txt`` pins its ``+cpu``
  build there): PyPI's Linux build of the same version is the CUDA one, gigabytes of ``nvidia-*`` packages;
* every other pin from PyPI, exactly the list (``--no-deps``; ``requirements.txt`` says what it leaves out and why);
* a step that fails removes the half-made environment, so that no later ``make`` takes it for one, and says in one
  line which package failed on which Python; pip's whole output is in ``.install.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The PyTorch project's index of CPU builds (https://pytorch.org/get-started/locally/).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LOG = ROOT / ".install.log"
#: Tested: Debian 12's 3.11.2 (CI installs with it) and later 3.11 releases.
OLDEST = (3, 11, 2)
TESTED = (3, 11)


def python_name() -> str:
    return f"Python {sys.version.split()[0]} ({sys.executable})"


def fail(line: str) -> None:
    print(f"make install failed: {line}", file=sys.stderr)
    raise SystemExit(1)


def why_pip_failed(output: str) -> str:
    """One line out of pip's output: which requirement, and why where pip says it."""
    missing = re.findall(r"No matching distribution found for (\S+)", output)
    offline = re.search(r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution"
                        r"|Network is unreachable|Could not fetch URL", output)
    if missing and offline and "(from versions: none)" in output:
        return f"{missing[-1]}: pip could not reach the package index (the network, or a proxy: see .install.log)"
    if missing:
        req = missing[-1]
        name, _, version = req.partition("==")
        other = re.search(r"require a different python version: (.*)", output)
        for part in (other.group(1).split(";") if other else []):
            if part.strip().startswith(version.split(";")[0] + " Requires-Python"):
                return f"{req} needs Python {part.split('Requires-Python', 1)[1].strip()}"
        return f"{req}: pip found no file of it for this Python and machine"
    different = re.search(r"Package '([^']+)' requires a different Python: (.*)", output)
    if different:
        return f"{different.group(1)} requires Python {different.group(2).split(' not in ', 1)[-1].strip()}"
    errors = [line.removeprefix("ERROR: ").strip() for line in output.splitlines() if line.startswith("ERROR:")]
    return errors[-1] if errors else (output.strip().splitlines() or ["pip failed"])[-1]


def torch_pin(requirements: Path) -> tuple[list[str], str | None]:
    """The lines of ``requirements`` without PyTorch's, and PyTorch's pin for this machine (its marker holds)."""
    rest, torch = [], None
    for line in requirements.read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if re.match(r"torch\s*==", text):
            pin, _, marker = text.partition(";")
            if not marker.strip() or marker_holds(marker):
                torch = pin.strip()
        elif text:
            rest.append(text)
    return rest, torch


def marker_holds(marker: str) -> bool:
    """The environment markers requirements.txt uses (sys_platform ==/!= '...', joined by and/or)."""
    expression = re.sub(r"sys_platform\s*(==|!=)\s*['\"]([^'\"]+)['\"]",
                        lambda m: str((sys.platform == m.group(2)) == (m.group(1) == "==")), marker)
    if not re.fullmatch(r"(\s|True|False|and|or|not|\(|\))*", expression):
        raise SystemExit(f"requirements.txt: a marker make install does not read: {marker.strip()}")
    return bool(eval(expression))  # only True, False, and, or, not and brackets are left


def run(step: str, cmd: list[str], log) -> None:
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    log.write(proc.stdout)
    if proc.returncode:
        raise InstallError(f"{step}: {why_pip_failed(proc.stdout)}")


class InstallError(Exception):
    pass


def install(venv: Path) -> None:
    if sys.prefix != sys.base_prefix:  # a virtual environment's Python (make puts .venv/bin first on PATH): its base
        base = getattr(sys, "_base_executable", "")  # makes the new one; this one may be the environment replaced
        if not base or os.path.abspath(base) == os.path.abspath(sys.executable):
            fail(f"{python_name()} is a virtual environment's: name the Python to make .venv with, "
                 "make install PYTHON=/usr/bin/python3.11")
        os.execv(base, [base, __file__, str(venv)])
    if sys.version_info[:3] < OLDEST:
        fail(f"{python_name()} is older than the course supports (3.11.2 and later 3.11): "
             "PYTHON=/path/to/python3.11 make install")
    if sys.version_info[:2] != TESTED and not os.environ.get("ALLOW_UNTESTED_PYTHON"):
        fail(f"{python_name()}: the course is tested on Python 3.11 only (README, \"Which Python\"); "
             "ALLOW_UNTESTED_PYTHON=1 make install to try it anyway")
    try:
        import ensurepip  # noqa: F401  (venv needs it to put pip in; Debian ships it apart)
    except ImportError:
        fail(f"{python_name()} cannot make an environment with pip: install its venv module "
             "(Debian and Ubuntu: sudo apt install python3.11-venv)")
    if venv.exists():  # a half-made one from a run that was stopped; never a folder that is not an environment
        if any(venv.iterdir()) and not (venv / "pyvenv.cfg").exists():
            fail(f"{venv} exists and is not a virtual environment: move it away, or name another (VENV=...)")
        shutil.rmtree(venv)
    pins, torch = torch_pin(ROOT / "requirements.txt")
    with open(LOG, "w", encoding="utf-8") as log, tempfile.TemporaryDirectory() as scratch:
        rest = Path(scratch) / "requirements.txt"
        log.write(f"make install with {python_name()}\n")
        try:
            run("the environment", [sys.executable, "-m", "venv", str(venv)], log)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile",
                   "--no-deps"]
            rest.write_text("\n".join(pins) + "\n", encoding="utf-8")
            run("the pinned packages", pip + ["-r", str(rest)], log)
            if torch:
                index = [] if sys.platform == "darwin" else ["--extra-index-url", TORCH_CPU_INDEX]
                run("PyTorch", pip + index + [torch], log)
            # bytecode on every core, the packages' own test suites left out
            run("bytecode", [str(venv / "bin" / "python"), "-c", "import sys; from attention_course.grading.deploy.environment "
                             f"import compile_tree; compile_tree(sys.executable, {str(venv / 'lib')!r})"], log)
            run("the course package", pip + ["--no-build-isolation", "-e", "."], log)
        except InstallError as error:
            shutil.rmtree(venv, ignore_errors=True)
            fail(f"{error} ({python_name()}; .venv removed; pip's output in {LOG.name})")
    # axe-core for the accessibility audit (pinned in tests/axe/package-lock.json), with Node.js's npm
    if shutil.which("npm"):
        npm = subprocess.run(["npm", "ci", "--prefix", "tests/axe", "--no-audit", "--no-fund", "--silent"], cwd=ROOT)
        if npm.returncode:
            shutil.rmtree(venv, ignore_errors=True)
            fail(f"npm ci in tests/axe failed ({python_name()}; .venv removed)")
    else:
        print("npm not found: the accessibility audit (make audit, tests/test_accessibility.py) needs Node.js")
    (venv / ".installed").touch()


if __name__ == "__main__":
    install(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".venv")
