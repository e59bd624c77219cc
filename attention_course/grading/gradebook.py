"""What the gradebook holds of an assignment, read in one place: the cells a hand-in is graded with, whether they are
still the master's in ``source/`` (:func:`.trust.tests_as_in_source`), a digest of them for autograde's fingerprint,
and the students' total scores (printed before and after a regrade)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from . import trust


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
    from nbgrader.api import MissingEntry

    try:
        return gb.find_assignment(assignment)
    except MissingEntry:
        return None


def differences(course: Path, db_url: str, course_id: str, assignment: str) -> list[str] | None:
    """How the gradebook's copy of ``assignment`` differs from ``source/`` (notebooks, tests, points), each a line;
    empty when they agree, None when the gradebook does not hold the assignment."""
    from nbgrader.api import Gradebook

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
    from nbgrader.api import Gradebook

    sha = hashlib.sha256()
    with Gradebook(db_url, course_id) as gb:
        record = _assignment(gb, assignment)
        for nb in sorted(record.notebooks, key=lambda n: n.name) if record is not None else []:
            cells, _ = notebook_cells(nb)  # by name: the database's order of rows may change as rows are updated
            sha.update(json.dumps([nb.name, sorted(cells.items())], default=str).encode())
    return sha.hexdigest()


def total_scores(db_url: str, course_id: str, assignment: str) -> dict[str, float]:
    """Each student's total score of ``assignment`` in the gradebook (before any late penalty)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        try:
            return {s.student.id: s.score for s in gb.assignment_submissions(assignment)}
        except MissingEntry:
            return {}


def submission_score(db_url: str, course_id: str, assignment: str, student: str) -> tuple[float, float, int]:
    """A hand-in's score, the assignment's points and how many answers wait for grading by hand."""
    from nbgrader.api import Gradebook, MissingEntry

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
        except SystemExit as exc:
            if "Cannot add or remove cells" in str(exc):
                raise SystemExit(
                    f"{assignment}: nbgrader cannot add or remove a graded cell once hand-ins are graded. Put the "
                    f"cell back in source/{assignment}, or start {assignment}'s grades afresh: `nbgrader db "
                    f"assignment remove {assignment} --force` (manual grades of it are lost), then `make release` "
                    "and `make autograde FORCE=1`.") from None
            raise
        refreshed.append(assignment)
    return refreshed
