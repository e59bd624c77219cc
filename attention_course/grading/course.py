"""Facts about this course that the tooling shares: assignments, folders, the gradebook."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from jupyter_core.paths import jupyter_config_path
from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

from attention_course.nbgrader_settings import COURSE_ID  # noqa: F401  (the course's id in nbgrader, kept where students' nbgrader reads it)

from . import trust

#: An assignment is a folder of ``source/`` named ``<two digits>_<name>``; the digits give the teaching order.
ASSIGNMENT_NAME = re.compile(r"\d\d_\w+")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "attention_course"
#: The file beside a graded hand-in in ``autograded/`` that says what it was graded with (:mod:`.run.plan`).
FINGERPRINT = ".autograde-fingerprint"
#: The service's folder in the course: its queue, its log, its workers' scratch courses, the writer's lock.
STATE_DIR = ".grading-service"


def available(course: Path = ROOT) -> list[str]:
    """The assignments of ``course``, in teaching order: its ``source/`` folders named like :data:`ASSIGNMENT_NAME`
    (adding an assignment is adding its folder)."""
    folder = course / "source"
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and ASSIGNMENT_NAME.fullmatch(p.name)) \
        if folder.is_dir() else []


def gradebook_url(course: Path = ROOT) -> str:
    """The course's default gradebook: ``gradebook.db`` (SQLite) in the course folder."""
    return f"sqlite:///{course / 'gradebook.db'}"


def scratch_course(folder: Path, assignments: list[str], config: str | None = None) -> Path:
    """A new course in ``folder/course`` with this course's configuration (or ``config``) and the given sources."""
    course = folder / "course"
    (course / "source").mkdir(parents=True)
    if config is None:
        shutil.copy(ROOT / "nbgrader_config.py", course)
    else:
        (course / "nbgrader_config.py").write_text(config)
    for a in assignments:
        shutil.copytree(ROOT / "source" / a, course / "source" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return course


def unusable_folders(course: Path) -> list[str]:
    """Folders in ``submitted/`` whose name is not a plain student id (never graded, reported)."""
    folder = course / "submitted"
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not trust.plain_id(p.name))


#: An assignment's catalogue of synthetic hand-ins (realistic mistakes, alternative answers: what the tests, the demo
#: class and the bench hand in), beside its master in source/<id>/. nbgrader never copies it (nbgrader_config.py
#: lists it in ``CourseDirectory.ignore``): no release, solution, autograded folder or feedback holds it.
CATALOGUE = "catalogue.py"


def exchange_root(course: Path) -> str:
    """The exchange folder the course's nbgrader configuration uses: ``NBGRADER_EXCHANGE_ROOT`` if set; else the
    ``Exchange.root`` of the user's or the system's nbgrader configuration (``~/.jupyter``, ``/etc/jupyter``, ...:
    what a JupyterHub deployment sets for everybody), so that a shell without the variable (ssh, cron) still finds
    the class's shared exchange; else the course's own ``exchange/`` folder (one machine, out of the box)."""
    if os.environ.get("NBGRADER_EXCHANGE_ROOT"):
        return os.environ["NBGRADER_EXCHANGE_ROOT"]

    root = None
    for folder in reversed(jupyter_config_path()):  # as nbgrader loads them: the user's folder last, and it wins
        if Path(folder).resolve() == course.resolve():
            continue
        for loader in (JSONFileConfigLoader("nbgrader_config.json", folder),
                       PyFileConfigLoader("nbgrader_config.py", folder)):
            try:
                config = loader.load_config()
            except ConfigFileNotFound:
                continue
            if "Exchange" in config and "root" in config.Exchange:
                root = str(config.Exchange.root)
    return root or str(course / "exchange")


def catalogue_path(assignment: str, course: Path = ROOT) -> Path:
    return course / "source" / assignment / CATALOGUE


def submission_problems(course: Path, student: str, assignment: str, notebooks: list[str]) -> list[str]:
    """What kept a hand-in from being graded as handed in: files refused as data (links, pipes, devices, hard
    links to files outside it, files too large), missing, renamed, unreadable or ungraded notebooks."""
    folder = course / "submitted" / student / assignment
    if not os.path.lexists(folder):
        return []
    handin = trust.submitted(course, student, assignment)
    problems = [f"refused {p}" for p in handin.problems()]
    for name in notebooks:
        path = folder / f"{name}.ipynb"
        if handin.whole or any(rel == f"{name}.ipynb" for rel, _ in handin.refused):
            continue  # refused above: scored 0
        if not handin.readable(f"{name}.ipynb"):
            others = sorted(rel for _, rel, _ in handin.files if rel.endswith(".ipynb") and "/" not in rel
                            and rel[:-6] not in notebooks)
            problems.append(f"{name}.ipynb missing" + (f" (handed in: {', '.join(map(trust.display_name, others))}; "
                                                       "rename it and autograde again)" if others else ""))
            continue
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            problems.append(f"{name}.ipynb is not a readable notebook (not valid JSON)")
            continue
        if not (course / "autograded" / student / assignment / f"{name}.ipynb").is_file():
            problems.append(f"{name}.ipynb could not be graded (see the autograde log)")
    return problems
