"""The student bundle (``make student-bundle``): what students get, installed in a fresh environment, where
nbgrader's Validate passes a solved notebook with the course's settings and fails the blank one.

The third-party pins (PyTorch, JupyterLab, nbgrader...) are the course's own (``bundle.closure`` takes each from
``requirements.txt``, at the version ``make install`` put into the course's venv), so the cache of them is made of the
very files pip installed there from those pins, taken as the hub's shared environment takes them (``environment.fill_env``:
each package whose files match its ``RECORD``, linked where the file system allows), in a folder outside the clone
keyed by the list's digest (``ATTENTION_STUDENT_DEPS``, default ``/opt/attention-from-scratch/student-deps``): a
second from-scratch install of PyTorch and JupyterLab would cost a fresh machine a minute of both cores and prove
nothing that ``make install`` does not. What the course's venv does not hold at its pinned version is installed as
the bundle's README says (``pip install --no-deps -r requirements.txt``).
Each run then makes a fresh virtual environment that sees those packages through a ``.pth`` line, installs the
bundle's ``package/`` into it with pip, and runs ``nbgrader validate`` from the bundle's folder, with neither the
repository nor the course's own environment in reach.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from attention_course.grading.bundle import NAME, write_bundle
from attention_course.grading.course import ROOT, available
from attention_course.grading.environment import fill_env
from tools.submissions import read_notebook, solved_notebook, write_notebook

from fastvalidate import FAILED, SUCCESS
from harness import answered_notebook, masters

CACHE = Path(os.environ.get("ATTENTION_STUDENT_DEPS", "/opt/attention-from-scratch/student-deps"))
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # the interpreter the course's venv was made from
A = available()[0]


def clean_env() -> dict:
    """An environment without the course's venv or the repository in reach."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH",
                                                              "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT)))
    return env


def run(*args, cwd, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True, text=True)
    assert not check or proc.returncode == 0, f"{' '.join(map(str, args))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc


def third_party(requirements: Path) -> Path:
    """The site-packages of the pins of ``requirements``, installed as the bundle's README says (cached)."""
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    venv = CACHE / key
    site = venv / Path(sysconfig.get_path("purelib", vars={"base": "."})).relative_to(".")
    if not (venv / ".complete").exists():
        scratch = CACHE / f".{key}.{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.parent.mkdir(parents=True, exist_ok=True)
        run(BASE_PYTHON, "-m", "venv", "--without-pip", scratch, cwd=scratch.parent)
        fill_env(scratch, [requirements], log=lambda _: None)  # with the pins, the pip that installs the package
        (scratch / ".complete").touch()
        shutil.rmtree(venv, ignore_errors=True)
        os.rename(scratch, venv)  # the venv's scripts name its folder, but the test uses its site-packages only
    return site


def test_the_student_bundle_installs_alone_and_validates_with_the_courses_settings(tmp_path):
    archive = write_bundle(ROOT, tmp_path / "out")
    folder = archive.with_suffix("")
    assert archive.is_file() and folder.is_dir()
    shipped = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert not [p for p in shipped if "/grading/" in p or "catalogue" in p or p.startswith("source")], shipped
    released = {f"assignments/{p.relative_to(ROOT / 'release').as_posix()}" for p in (ROOT / "release").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    assert released <= shipped, released - shipped
    pins = [line for line in (folder / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\[\]-]+==[\w.+]+", p) for p in pins), pins
    names = {p.split("==")[0].lower() for p in pins}
    assert {"torch", "nbgrader", "jupyterlab", "numpy", "matplotlib", "seaborn"} <= names
    assert not names & {"dask", "distributed", "pytest", "playwright", "ruff", "copydetect", "jupyterhub"}, names

    site = third_party(folder / "requirements.txt")
    venv = tmp_path / "student-venv"
    run(BASE_PYTHON, "-m", "venv", "--without-pip", venv, cwd=tmp_path)  # pip and setuptools: the pinned ones
    ours = venv / Path(sysconfig.get_path("purelib", vars={"base": "."})).relative_to(".")
    (ours / "student-deps.pth").write_text(f"{site}\n")
    run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "./package",
        cwd=folder)
    where = run(venv / "bin" / "python", "-c", "import importlib.util, attention_course; print(attention_course.__file__);"
                "print(importlib.util.find_spec('attention_course.grading'))", cwd=tmp_path).stdout.split()
    assert where[0].startswith(str(venv)) and where[1] == "None", where

    notebook = next((folder / "assignments" / A).glob("*.ipynb"))
    solved = answered_notebook(read_notebook(notebook), solved_notebook(masters(A)[notebook.name]))
    write_notebook(solved, tmp_path / "work" / "solved" / notebook.name)
    shutil.copy(notebook, tmp_path / "blank.ipynb")
    said = {case: re.sub(r"\x1b\[[0-9;]*m", "", run(venv / "bin" / "python", "-m", "nbgrader", "validate", path, cwd=folder,
                                                    check=False).stdout)
            for case, path in (("solved", tmp_path / "work" / "solved" / notebook.name),
                               ("blank", tmp_path / "blank.ipynb"))}
    assert SUCCESS in said["solved"], said["solved"][-3000:]
    assert FAILED in said["blank"], said["blank"][-2000:]
    assert NAME in str(folder)
