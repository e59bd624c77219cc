"""What students get (``make student-bundle``): ``bundle/attention-from-scratch-student/`` and its zip.

* ``assignments/<id>/``: the release (``release/``), nothing of ``source/``;
* ``package/``: the course's student package, ``attention_course`` without ``grading/`` (the checks, plots and data
  the notebooks import, and the course's Validate settings);
* ``requirements.txt``: the pins of what a student runs (JupyterLab, nbgrader's Validate and Assignment List,
  NumPy, PyTorch, Matplotlib, seaborn) and of everything they need, taken from the course's ``requirements.txt``;
* ``nbgrader_config.py``: the students' nbgrader settings: the course id and the course's Validate settings
  (:mod:`attention_course.nbgrader_settings`, which the hub's student servers read too);
* ``README.md``: how to install and start.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

from .course import ROOT, available

NAME = "attention-from-scratch-student"
#: What a student runs; their dependencies come along.
STUDENT_PACKAGES = ["jupyterlab", "nbgrader", "numpy", "torch", "matplotlib", "seaborn"]
#: Pinned in the course's list but left out on purpose (requirements.txt says why); a student's install leaves
#: them out too.
LEFT_OUT = {"rfc3987-syntax", "lark"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> "name==version" of a requirements file of pins."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            found[_name(line.split("==", 1)[0].split("[", 1)[0])] = line
    return found


def closure(roots: list[str], pinned: dict[str, str]) -> list[str]:
    """The pins of ``roots`` and of everything they require, extras asked for included (markers evaluated for
    this interpreter), from the installed distributions' metadata; a requirement with no pin stops with its name."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    seen, done, todo = set(), set(), [(_name(r), "") for r in roots]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in done or name in LEFT_OUT:
            continue
        done.add((name, extra))
        if name not in pinned:
            raise SystemExit(f"{name} is needed by the student bundle but has no pin in requirements.txt")
        seen.add(name)
        try:
            wanted = requires(name) or []
        except PackageNotFoundError:
            raise SystemExit(f"{name} is pinned but not installed: run make install first") from None
        for text in wanted:
            req = Requirement(text)
            base = req.marker is None or req.marker.evaluate({"extra": ""})
            # the node (name, "") takes the base requirements, (name, extra) what the extra adds
            if (not extra and base) or (extra and not base and req.marker.evaluate({"extra": extra})):
                todo += [(_name(req.name), "")] + [(_name(req.name), e) for e in sorted(req.extras)]
    return sorted(pinned[n] for n in seen)


README = """# Attention from Scratch: the student bundle

The assignments are in `assignments/`. To work on them you need Python 3.11.

    python3.11 -m venv .venv
    .venv/bin/pip install --no-deps -r requirements.txt ./package
    .venv/bin/jupyter lab

Start JupyterLab from this folder: its `nbgrader_config.py` gives nbgrader's **Validate** button the course's
settings. Open a notebook in `assignments/`, work through it, and press **Validate** before you hand it in:
"Success" means every visible check passes. Hidden checks grade the same functions on other inputs.

On the course's JupyterHub you need none of this: fetch the assignments from **Nbgrader > Assignment List**.
"""


CONFIG = """\"\"\"nbgrader settings for the course's students: the course id and the course's Validate settings.\"\"\"

from attention_course.nbgrader_settings import COURSE_ID, validate_settings

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)
c.CourseDirectory.course_id = COURSE_ID
validate_settings(c)
"""


def write_bundle(course: Path = ROOT, out: Path | None = None) -> Path:
    """Write the bundle folder and its zip into ``out`` (default ``<course>/bundle``); returns the zip's path."""
    out = out or course / "bundle"
    folder = out / NAME
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    released = [a for a in available(course) if (course / "release" / a).is_dir()]
    if not released:
        raise SystemExit("release/ holds no assignment: run make release first")
    for a in released:
        shutil.copytree(course / "release" / a, folder / "assignments" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    package = folder / "package"
    shutil.copytree(ROOT / "attention_course", package / "attention_course",
                    ignore=shutil.ignore_patterns("grading", "__pycache__", "*.pyc"))
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "attention-course"\nversion = "0.1.0"\n'
        'description = "Checks, plots and data of the Attention from Scratch course"\nrequires-python = ">=3.11"\n\n'
        '[tool.setuptools]\npackages = ["attention_course"]\n', encoding="utf-8")
    lines = closure(STUDENT_PACKAGES, pins(ROOT / "requirements.txt"))
    setuptools = pins(ROOT / "requirements.txt").get("setuptools")
    if setuptools and setuptools not in lines:  # ./package builds with it
        lines.append(setuptools)
    (folder / "requirements.txt").write_text(
        "# What a student runs (JupyterLab, nbgrader's Validate, NumPy, PyTorch CPU, Matplotlib, seaborn) and all it\n"
        "# needs, pinned as the course pins them (and only them: install with --no-deps, as the README says).\n"
        + "\n".join(sorted(lines)) + "\n", encoding="utf-8")
    (folder / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")
    (folder / "README.md").write_text(README, encoding="utf-8")
    archive = out / f"{NAME}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(out).as_posix())
    return archive
