"""What the gradebook holds of an assignment, read in one place: the cells a hand-in is graded with, whether they are
still the master's in ``source/`` (:func:`.trust.tests_as_in_source`), a digest of them for autograde's fingerprint,
and the students' total scores (printed before and after a regrade); and where an assignment is put into it
(:func:`register`, :func:`prepare_gradebook`) before workers write at once."""

from __future__ import annotations

import fcntl
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader

from .. import trust
from ..course import STATE_DIR
from ..errors import GradebookError


def notebook_cells(notebook) -> tuple[dict, list[str]]:
    """A gradebook notebook's cells as :func:`.trust.rebuilt_cells` takes them: name -> (cell_type, source, locked,
    checksum, points, role), and their names in the gradebook's order."""
    points = {c.name: c.max_score for c in notebook.grade_cells}
    points.update({c.name: c.max_score for c in notebook.task_cells})
    roles = {c.name: "solution" for c in notebook.solution_cells}
    roles.update({c.name: "task" for c in notebook.task_cells})
    cells = {c.name: (c.cell_type, c.source, bool(c.locked), c.checksum, points.get(c.name), roles.get(c.name))
             for c in notebook.source_cells}
    return cells, [c.name for c in notebook.source_cells]


def master_cells(course: Path, assignment: str, notebook: str) -> list | None:
    """The cells of ``source/<assignment>/<notebook>.ipynb``, None where it cannot be read."""
    try:
        master = json.loads((Path(course) / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        return list(master["cells"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _assignment(gb, assignment: str):
    try:
        return gb.find_assignment(assignment)
    except MissingEntry:
        return None


def differences(course: Path, db_url: str, course_id: str, assignment: str) -> list[str] | None:
    """How the gradebook's copy of ``assignment`` differs from ``source/`` (notebooks, tests, points), each a line;
    empty when they agree, None when the gradebook does not hold the assignment."""
    with Gradebook(db_url, course_id) as gb:
        record = _assignment(gb, assignment)
        if record is None:
            return None
        held = {nb.name: notebook_cells(nb)[0] for nb in record.notebooks}
    masters = {p.stem for p in (Path(course) / "source" / assignment).glob("*.ipynb")}
    lines = [f"{name}.ipynb is new in source/" for name in sorted(masters - set(held))]
    lines += [f"{name}.ipynb is gone from source/" for name in sorted(set(held) - masters)]
    for name in sorted(masters & set(held)):
        cells = master_cells(course, assignment, name)
        lines += [f"{name}: {line}" for line in trust.tests_as_in_source(cells, held[name])]
    return lines


def digest(db_url: str, course_id: str, assignment: str) -> str:
    """A digest of what the gradebook grades ``assignment`` with: every notebook's cells, sources and points."""
    sha = hashlib.sha256()
    with Gradebook(db_url, course_id) as gb:
        record = _assignment(gb, assignment)
        for nb in sorted(record.notebooks, key=lambda n: n.name) if record is not None else []:
            cells, _ = notebook_cells(nb)  # by name: the database's order of rows may change as rows are updated
            sha.update(json.dumps([nb.name, sorted(cells.items())], default=str).encode())
    return sha.hexdigest()


def total_scores(db_url: str, course_id: str, assignment: str) -> dict[str, float]:
    """Each student's total score of ``assignment`` in the gradebook (before any late penalty)."""
    with Gradebook(db_url, course_id) as gb:
        try:
            return {s.student.id: s.score for s in gb.assignment_submissions(assignment)}
        except MissingEntry:
            return {}


def submission_score(db_url: str, course_id: str, assignment: str, student: str) -> tuple[float, float, int]:
    """A hand-in's score, the assignment's points and how many answers wait for grading by hand."""
    with Gradebook(db_url, course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, 0.0, 0
        return round(sub.score, 2), sub.max_score, sum(1 for nb in sub.notebooks for g in nb.grades
                                                        if g.needs_manual_grade)


def changed_scores(before: dict, after: dict) -> list[tuple[str, str, float, float]]:
    """(assignment, student, before, after) of every total that a run changed (a first grade is no change)."""
    return [(a, s, before[a][s], after[a][s]) for a in sorted(after) for s in sorted(after[a])
            if s in before.get(a, {}) and abs(after[a][s] - before[a][s]) > 1e-9]


def refresh_tests(course: Path, db_url: str, course_id: str, assignments: list[str], register, stream=sys.stderr
                  ) -> list[str]:
    """Put into the gradebook again, from ``source/`` (``register(course, db_url, assignment)``, as ``make release``
    does), each assignment whose tests or points there are no longer the master's, saying what changed; returns
    those assignments. nbgrader cannot add or remove a graded cell
    once hand-ins are graded: that stops the run with what to do."""
    refreshed = []
    for assignment in assignments:
        lines = differences(course, db_url, course_id, assignment)
        if not lines:
            continue
        shown = "\n".join(f"  {line}" for line in lines[:12]) + (f"\n  ... and {len(lines) - 12} more"
                                                                 if len(lines) > 12 else "")
        stream.write(f"source/{assignment} changed since the gradebook took its tests:\n{shown}\n"
                     f"Putting source/{assignment}'s tests into the gradebook (as `make release` does); every "
                     f"hand-in of {assignment} is graded again with them. Release it again (`make release`) so "
                     "that students' Validate runs the same visible tests.\n")
        try:
            register(course, db_url, assignment)
        except GradebookError as exc:
            if "Cannot add or remove cells" in str(exc):
                raise GradebookError(
                    f"{assignment}: nbgrader cannot add or remove a graded cell once hand-ins are graded. Put the "
                    f"cell back in source/{assignment}, or start {assignment}'s grades afresh: `nbgrader db "
                    f"assignment remove {assignment} --force` (manual grades of it are lost), then `make release` "
                    "and `make autograde FORCE=1`.") from None
            raise
        refreshed.append(assignment)
    return refreshed


def register(course: Path, db_url: str, assignment: str) -> None:
    """Put an assignment into the gradebook as ``nbgrader generate_assignment`` would (its notebooks,
    cells, checksums), writing the student version into a scratch folder rather than ``release/``."""
    with tempfile.TemporaryDirectory(prefix="attention-register-") as scratch:
        app = NbGrader()
        app.initialize([])
        app.config.CourseDirectory.root = str(course)
        app.config.CourseDirectory.db_url = db_url
        app.config.CourseDirectory.release_directory = scratch
        app.log.setLevel("ERROR")
        result = NbGraderAPI(parent=app).generate_assignment(assignment, force=True, create=True)
    if not result.get("success"):
        errors = [line for line in result.get("log", "").splitlines() if line.strip()][-12:]
        raise GradebookError(f"{assignment} could not be put into the gradebook {db_url}:\n" + "\n".join(errors))


def prepare_gradebook(course: Path, db_url: str, course_id: str, assignments: list[str], students: set[str],
                      stream=sys.stderr) -> None:
    """Register assignments the gradebook lacks and add missing students, before workers write at once."""
    with Gradebook(db_url, course_id) as gb:
        missing = []
        for assignment in assignments:
            try:
                gb.find_assignment(assignment)
            except MissingEntry:
                missing.append(assignment)
    for assignment in missing:
        stream.write(f"{assignment} is not in the gradebook yet: registering it from source/{assignment}\n")
        register(course, db_url, assignment)
    with Gradebook(db_url, course_id) as gb:
        known = {s.id for s in gb.students}
        for student in sorted(students - known):
            gb.add_student(student)


#: The writer locks this process holds (:class:`Writer`).
_HELD: set = set()


def close_inherited_locks() -> None:
    """In a process just forked from one holding the writer lock (a grading process of the course command): close its
    copy of the lock's file, so that the lock ends with the process that took it. Closing a copy releases nothing while
    the parent's stays open (an ``flock`` belongs to the open file, not to one descriptor); unlocking would."""
    for writer in list(_HELD):
        if writer.handle is not None:
            writer.handle.close()
            writer.handle = None
    _HELD.clear()


class Writer:
    """The gradebook's one writer: an exclusive lock on ``<course>/.grading-service/writer.lock`` held by the grading
    service while it grades and by ``make autograde`` for its run (stock ``nbgrader autograde`` and the Formgrader's
    button do not take it: docs/grading.md). A run that must wait says so and leaves ``writer.wanted``, and the
    service then starts nothing new until the run has had its turn."""

    def __init__(self, course: Path):
        self.folder = Path(course) / STATE_DIR
        self.handle = None

    def acquire(self, block: bool) -> bool:
        if self.handle is not None:
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        handle = open(self.folder / "writer.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return False
        self.handle = handle
        _HELD.add(self)
        return True

    def release(self) -> None:
        _HELD.discard(self)
        if self.handle is not None:
            self.handle.close()  # closing the file releases the lock
            self.handle = None

    @property
    def wanted(self) -> bool:
        return (self.folder / "writer.wanted").exists()

    def __enter__(self):
        """Wait for the lock as a one-off run (``make autograde``), saying so when the service holds it."""
        if not self.acquire(block=False):
            sys.stderr.write("The grading service is grading hand-ins: waiting for it to finish those it has "
                             "started (it starts no new ones meanwhile) ...\n")
            wanted = self.folder / "writer.wanted"
            wanted.touch()
            try:
                self.acquire(block=True)
            finally:
                wanted.unlink(missing_ok=True)
        return self

    def __exit__(self, *exc):
        self.release()
