"""Which hand-ins need grading: each hand-in's fingerprint, and the plan of a run.

A submission is skipped when it was graded before and nothing that decides its grade changed: its files, the
assignment's source, the gradebook's copy of its tests and points, the course configuration and the course package
(a fingerprint in ``autograded/<student>/<assignment>/.autograde-fingerprint``, :data:`.course.FINGERPRINT`), and
the gradebook still holds its grades. ``--force`` grades everything again.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from .. import trust
from ..course import FINGERPRINT, PACKAGE_DIR
from ..nbgrader_glue.gradebook import digest, total_scores
from ..nbgrader_glue.term import course_term


@dataclass
class Job:
    assignment: str
    student: str
    fingerprint: str


def hash_tree(digest, root: Path, skip=()) -> None:
    if not root.exists():
        digest.update(b"<missing>")
        return
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for path in paths:
        rel = path.relative_to(root).as_posix() if path != root else path.name
        if any(part in skip or part.startswith(".ipynb_checkpoints") for part in Path(rel).parts):
            continue
        digest.update(rel.encode() + b"\0")
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            digest.update(b"<unreadable>")


def course_fingerprint(course: Path, assignment: str) -> str:
    """What decides every grade of an assignment besides the hand-in: source, the files its release gives every
    kernel (:func:`.trust.kernel_files`), configuration, course package."""
    digest = hashlib.sha256()
    hash_tree(digest, course / "source" / assignment)
    hash_tree(digest, course / "release" / assignment, skip=tuple(
        p.name for p in (course / "release" / assignment).glob("*.ipynb")))
    hash_tree(digest, course / "nbgrader_config.py")
    hash_tree(digest, PACKAGE_DIR, skip=("__pycache__",))
    return digest.hexdigest()


def fingerprint(course: Path, assignment: str, student: str, base: str, extra: str = "") -> str:
    """What decides a hand-in's grade: ``base`` (:func:`course_fingerprint`), ``extra`` (the student's extension),
    the files it may be graded on (:func:`.trust.submitted`) and what was refused, a link with the path it points
    to."""
    digest = hashlib.sha256((base + extra).encode())
    handin = trust.submitted(course, student, assignment)
    for path, rel, _ in handin.files:
        digest.update(rel.encode() + b"\0")
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            digest.update(b"<unreadable>")
    for rel, why in handin.refused:
        try:
            target = os.readlink(handin.root / rel) if rel != "." else os.readlink(handin.root)
        except OSError:
            target = ""
        digest.update(f"refused\0{rel}\0{why}\0{target}\0".encode())
    return digest.hexdigest()


def grading_base(course: Path, db_url: str, course_id: str, assignment: str, course_print: str = "") -> str:
    """:func:`course_fingerprint` (``course_print`` where known) and the gradebook's copy of the tests and points."""
    return (course_print or course_fingerprint(course, assignment)) + digest(db_url, course_id, assignment)


def handin_fingerprint(course: Path, assignment: str, student: str, base: str, term) -> str:  # plan, the service
    """:func:`fingerprint` of a student's hand-in, their extension in the term included (what the skip compares)."""
    return fingerprint(course, assignment, student, base, f"extension {term.extension(student, assignment)}")


def plan(course: Path, assignments: list[str], db_url: str, course_id: str, force: bool):
    """The submissions to grade and those skipped as unchanged."""
    todo, skipped = [], []
    term = course_term(course)
    term.check()
    for assignment in assignments:
        base = grading_base(course, db_url, course_id, assignment)
        graded = set() if force else set(total_scores(db_url, course_id, assignment))
        for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
            if not folder.is_dir() or not trust.plain_id(folder.parent.name):
                continue
            student = folder.parent.name
            job = Job(assignment, student, handin_fingerprint(course, assignment, student, base, term))
            mark = course / "autograded" / student / assignment / FINGERPRINT
            try:
                unchanged = mark.read_text().strip() == job.fingerprint
            except OSError:
                unchanged = False
            (skipped if unchanged and student in graded else todo).append(job)
    return todo, skipped
