"""What students get (``make student-bundle``): ``bundle/attention-from-scratch-student/`` and its zip.

* ``assignments/<id>/``: the release (``release/``) of the assignments released to the exchange, or of those named
  (``ONLY=``), nothing of ``source/``;
* ``package/``: the course's student package, ``attention_course`` without ``grading/`` (the checks, plots and data
  the notebooks import, and the course's Validate settings), and the Jupyter settings it installs into the
  environment's ``etc/jupyter``: the course's nbgrader settings, and no Assignment List or Formgrader (offline);
* ``requirements.txt``: the pins of what a student runs (JupyterLab, nbgrader's Validate, NumPy, PyTorch's CPU build,
  Matplotlib, seaborn) and of everything they need, taken from the course's ``requirements.txt``;
* ``nbgrader_config.py``: the same nbgrader settings, for a JupyterLab started in the folder;
* ``README.md``: how to install (Linux, macOS, Windows), work, validate and hand in.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement

from ..course import COURSE_ID, ROOT, available, exchange_root
from ..errors import EnvironmentMismatch, UsageError

NAME = "attention-from-scratch-student"
#: What a student runs; their dependencies come along, and so does every distribution a released notebook imports
#: (:func:`notebook_imports`: threadpoolctl, say).
STUDENT_PACKAGES = ["jupyterlab", "nbgrader", "numpy", "torch", "matplotlib", "seaborn"]
#: Left out of the course's own list on purpose (requirements.txt says why) but pinned for students: their install
#: resolves dependencies (each system needs packages of its own), and jsonschema's extra that jupyter-events asks
#: for brings these two along.
LEFT_OUT = {"rfc3987-syntax", "lark"}
STUDENT_EXTRA_PINS = ["lark==1.3.1", "rfc3987-syntax==1.1.0",
                      # what other systems need (the course's machines, Linux, install none of them)
                      'appnope==0.1.4 ; sys_platform == "darwin"', 'colorama==0.4.6 ; sys_platform == "win32"',
                      'pywinpty==3.1.2 ; os_name == "nt"']


def notebook_imports(notebooks: list[Path]) -> set[str]:
    """The top-level modules the code cells of ``notebooks`` import (magics and shell lines left out)."""
    found: set[str] = set()
    for path in notebooks:
        for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
            if cell.get("cell_type") != "code":
                continue
            source = "".join(cell.get("source", ""))
            source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
    return found


def distributions_of(modules: set[str]) -> list[str]:
    """The installed distributions that provide ``modules`` (the standard library's and the course's left out)."""
    provided = packages_distributions()
    return sorted({dist for module in modules - set(sys.stdlib_module_names) - {"attention_course"}
                   for dist in provided.get(module, [])})


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pin_lines(path: Path) -> dict[str, list[str]]:
    """name -> its pins in a requirements file, markers kept (PyTorch has one line per kind of machine)."""
    found: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            found.setdefault(_name(line.split("==", 1)[0].split("[", 1)[0].split(";", 1)[0].strip()), []).append(line)
    return found


def pins(path: Path) -> dict[str, str]:
    """name -> "name==version" of a requirements file of pins, the one whose marker holds on this machine."""
    found = {}
    for name, lines in pin_lines(path).items():
        for line in lines:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate():
                found[name] = line.split(";", 1)[0].strip()
    return found


def closure(roots: list[str], pinned: dict[str, str]) -> list[str]:
    """The pins of ``roots`` and of everything they require, extras asked for included (markers evaluated for
    this interpreter), from the installed distributions' metadata; a requirement with no pin stops with its name."""
    seen, done, todo = set(), set(), [(_name(r), "") for r in roots]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in done or name in LEFT_OUT:
            continue
        done.add((name, extra))
        if name not in pinned:
            raise EnvironmentMismatch(f"{name} is needed by the student bundle but has no pin in requirements.txt")
        seen.add(name)
        try:
            wanted = requires(name) or []
        except PackageNotFoundError:
            raise EnvironmentMismatch(f"{name} is pinned but not installed: run make install first") from None
        for text in wanted:
            req = Requirement(text)
            base = req.marker is None or req.marker.evaluate({"extra": ""})
            # the node (name, "") takes the base requirements, (name, extra) what the extra adds
            if (not extra and base) or (extra and not base and req.marker.evaluate({"extra": extra})):
                todo += [(_name(req.name), "")] + [(_name(req.name), e) for e in sorted(req.extras)]
    return sorted(pinned[n] for n in seen)


#: The PyTorch project's index of CPU builds (https://pytorch.org/get-started/locally/): PyPI's Linux torch is the CUDA
#: build, with gigabytes of nvidia-* packages.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Measured on Linux x86_64 with Python 3.11 (tests/test_bundle.py prints them): the wheels pip downloads, and the
#: environment they make.
DOWNLOAD_MB, TORCH_MB, INSTALLED_GB = 330, 192, 1.3

README = """# Attention from Scratch: the assignments on your own computer

`assignments/` holds {listing}. You need Python 3.11 (3.11.2 or later) and about {installed} GB of disk: pip
downloads about {download} MB, {torch} MB of it PyTorch's CPU build (no graphics card is needed or used).

## Install, once

Open a terminal in this folder.

Linux (Debian and Ubuntu: `sudo apt install python3.11-venv` first; where the system has no Python 3.11, install
one from python.org or your package manager):

    python3.11 -m venv .venv
    .venv/bin/python -m pip install --extra-index-url {index} -r requirements.txt ./package

macOS on Apple silicon (PyPI's PyTorch is the CPU build there; PyTorch publishes no build of this version for Intel
Macs: work on the course's JupyterHub instead):

    python3.11 -m venv .venv
    .venv/bin/python -m pip install -r requirements.txt ./package

Windows, in PowerShell or Command Prompt. Unzip this folder to a short path first (`C:\\\\afs`, say): some of
PyTorch's file names are long, and Windows refuses paths over 260 characters unless long paths are enabled.

    py -3.11 -m venv .venv
    .venv\\Scripts\\python -m pip install --extra-index-url {index} -r requirements.txt ./package

The extra index is the PyTorch project's own, for its CPU build: without it, pip on Linux would look for the CUDA
build (gigabytes) and find no `2.13.0+cpu`. Check the install with
`.venv/bin/python -c "import torch; print(torch.__version__)"` (Windows: `.venv\\Scripts\\python`), which prints
`2.13.0+cpu` (`2.13.0` on macOS). If an install went wrong, delete `.venv` and install again.

## Work

Linux and macOS: `.venv/bin/jupyter lab`. Windows: `.venv\\Scripts\\jupyter lab`.

Open a notebook in `assignments/`, work through it, and press **Validate** in the notebook's toolbar before you
hand it in: "Success" means every visible check passes on your code. Hidden checks grade the same functions on
other inputs, so an answer written for the visible example alone loses points. If Validate says a cell of the
course's could not import a package, look at the installation (or for a file of yours named like that package)
before your answers. A cell that runs out of time says so; on a loaded machine, validate again later.

The course's nbgrader settings come with `./package` (Validate's limits, the checks' full messages). This bundle
works offline: it has no Assignment List and no Formgrader.

## Hand in

Hand in each assignment's notebook file itself (`assignments/<assignment>/<notebook>.ipynb`), under its own name,
where your instructor collects work. On the course's JupyterHub: fetch the assignment there from **Nbgrader >
Assignment List**, copy your notebook's answers into it (or upload your file over it, same name), run Validate,
and press **Submit**. Only your answer cells count: the course's cells are locked, and a changed one is graded as
the course wrote it.
"""


CONFIG = """\"\"\"nbgrader settings for the course's students: the course id and the course's Validate settings.\"\"\"

from attention_course.nbgrader_settings import COURSE_ID, validate_settings

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)
c.CourseDirectory.course_id = COURSE_ID
validate_settings(c)
"""

#: The bundle's Jupyter settings, installed with ./package into <environment>/etc/jupyter (read wherever JupyterLab
#: starts): offline, so no Assignment List, Formgrader, course list or Create Assignment; Validate on.
SERVER_CONFIG = {"ServerApp": {"jpserver_extensions": {
    "nbgrader.server_extensions.formgrader": False, "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.course_list": False, "nbgrader.server_extensions.validate_assignment": True}}}
PAGE_CONFIG = {"disabledExtensions": {f"@jupyter/nbgrader:{name}": True
                                      for name in ("formgrader", "course-list", "create-assignment", "assignment-list", "menu")}}

PYPROJECT = """[build-system]
requires = ["setuptools==84.2.1"]
build-backend = "setuptools.build_meta"

[project]
name = "attention-course"
version = "0.1.0"
description = "Checks, plots and data of the Attention from Scratch course, and its nbgrader settings"
requires-python = ">=3.11"

[tool.setuptools]
packages = ["attention_course"]

[tool.setuptools.data-files]
"etc/jupyter" = ["jupyter/nbgrader_config.py", "jupyter/jupyter_server_config.json"]
"etc/jupyter/labconfig" = ["jupyter/labconfig/page_config.json"]
"""


def released_assignments(course: Path) -> list[str]:
    """The assignments released to students: those in the exchange's outbound folder of the course."""
    outbound = Path(exchange_root(course)) / COURSE_ID / "outbound"
    try:
        names = {p.name for p in outbound.iterdir() if p.is_dir()}
    except OSError:
        return []
    return [a for a in available(course) if a in names]


def write_bundle(course: Path = ROOT, out: Path | None = None, assignments: list[str] | None = None) -> Path:
    """Write the bundle folder and its zip into ``out`` (default ``<course>/bundle``); returns the zip's path. It holds
    ``assignments``, or else those released to the exchange (:func:`released_assignments`)."""
    out = out or course / "bundle"
    folder = out / NAME
    chosen = assignments if assignments is not None else released_assignments(course)
    if not chosen:
        raise UsageError("No assignment is released to the exchange yet: name the ones students get, "
                         "make student-bundle ONLY='01_self_attention 02_multihead_attention' (or ONLY=all)")
    if chosen == ["all"]:
        chosen = available(course)
    unknown = [a for a in chosen if a not in available(course) or not (course / "release" / a).is_dir()]
    if unknown:
        raise UsageError(f"not in release/: {', '.join(unknown)} (make release first; the assignments are "
                         f"{', '.join(available(course))})")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for a in chosen:
        shutil.copytree(course / "release" / a, folder / "assignments" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    package = folder / "package"
    shutil.copytree(ROOT / "attention_course", package / "attention_course",
                    ignore=shutil.ignore_patterns("grading", "__pycache__", "*.pyc"))
    (package / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (package / "jupyter" / "labconfig").mkdir(parents=True)
    (package / "jupyter" / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")
    (package / "jupyter" / "jupyter_server_config.json").write_text(json.dumps(SERVER_CONFIG, indent=2) + "\n")
    (package / "jupyter" / "labconfig" / "page_config.json").write_text(json.dumps(PAGE_CONFIG, indent=2) + "\n")
    every = pin_lines(ROOT / "requirements.txt")
    roots = STUDENT_PACKAGES + distributions_of(notebook_imports(sorted((folder / "assignments").rglob("*.ipynb"))))
    names = {_name(line.split("==", 1)[0]) for line in closure(roots, pins(ROOT / "requirements.txt"))}
    names.add("setuptools")  # ./package builds with it
    lines = sorted([line for name in names for line in every.get(name, [])] + STUDENT_EXTRA_PINS)
    (folder / "requirements.txt").write_text(
        "# What a student runs (JupyterLab, nbgrader's Validate, NumPy, PyTorch CPU, Matplotlib, seaborn) and all it\n"
        "# needs, pinned as the course pins them. PyTorch: its CPU build (+cpu) from the PyTorch project's index on Linux\n"
        "# and Windows (README.md gives the command), PyPI's on macOS.\n"
        + "\n".join(lines) + "\n", encoding="utf-8")
    (folder / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")  # for a JupyterLab started from this folder
    listing = ", ".join(f"`{a}`" for a in chosen)
    (folder / "README.md").write_text(README.format(listing=listing, index=TORCH_CPU_INDEX, download=DOWNLOAD_MB,
                                                    torch=TORCH_MB, installed=INSTALLED_GB), encoding="utf-8")
    archive = out / f"{NAME}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(out).as_posix())
    return archive
