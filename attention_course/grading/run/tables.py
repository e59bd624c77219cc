"""The grade table and its exports: per-student scores from the gradebook, as the terminal, ``grades.csv`` and
Canvas's import have them (``python -m attention_course.grading table``, ``make grades``)."""

from __future__ import annotations

import csv
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from .. import trust
from ..course import ROOT, submission_problems, unusable_folders
from ..nbgrader_glue.term import course_term, standing


def cell_scores(db_url: str, assignment: str) -> dict:
    """Every graded cell of every submission: student -> {grade cell: (score, max, needs manual grade)}."""
    result = {}
    with Gradebook(db_url) as gb:
        for sub in gb.assignment_submissions(assignment):
            result[sub.student.id] = {grade.name: (grade.score, grade.max_score, grade.needs_manual_grade)
                                      for nb in sub.notebooks for grade in nb.grades}
    return result


#: What the table and the exports show for a hand-in whose autograding did not finish: it has no score yet (its
#: cause is in the autograde log and the problems column), never a 0 the student did not earn.
NOT_GRADED = "not graded"


#: What the table, grades.csv and the report show for a hand-in that never came: :data:`MISSING` after the
#: student's deadline (the due date plus their extension; 0 in the total and, by default, in the Canvas export),
#: :data:`NOT_YET_DUE` before it (blank in the Canvas export: Canvas leaves it unchanged). Without a due date the
#: cell stays blank.
MISSING, NOT_YET_DUE = "missing", "not yet due"


def utc_now():
    """Now in UTC without its zone, as nbgrader stores dates (and :meth:`.term.Term.deadline` gives them)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def not_handed_in(term, course: Path, student: str, assignment: str, fallback=None, now=None) -> tuple[str, str]:
    """(cell, note) for a student with no submission of ``assignment`` in the gradebook: (:data:`MISSING`, a note
    with the due date and their extension) once their deadline (:meth:`.term.Term.deadline`; ``fallback``: the
    gradebook's due date) has passed, (:data:`NOT_YET_DUE`, "") before it, ("", "") without a due date or while a
    hand-in of theirs waits in ``submitted/`` for autograde (handed in, so not missing)."""
    deadline = term.deadline(student, assignment, fallback)
    if deadline is None or os.path.lexists(course / "submitted" / student / assignment):
        return "", ""
    if (now or utc_now()) < deadline:
        return NOT_YET_DUE, ""
    due = term.due_date(assignment) or fallback
    extension = term.extension(student, assignment)
    days = extension.total_seconds() / 86400 if extension else 0
    said = f", extension {days:g} day{'' if days == 1 else 's'}" if days else ""
    return MISSING, f"{assignment}: {MISSING} (due {due:%Y-%m-%d %H:%M} UTC{said})"


def autograded(submission) -> bool:
    """Whether autograde recorded scores for a submission of the gradebook (one that failed has none at all)."""
    return any(g.auto_score is not None for nb in submission.notebooks for g in nb.grades)


def score_table(db_url: str, assignments: list[str], course: Path = ROOT, marks: dict | None = None,
                term=None, now=None) -> tuple[list[str], list[list]]:
    """Per-student, per-assignment scores from the gradebook.

    Returns the header and one row per student: id, the final score of each assignment (after its late penalty;
    where nothing was submitted :data:`MISSING` after the student's deadline, counting 0 in the total,
    :data:`NOT_YET_DUE` before it, blank without a due date (:func:`not_handed_in`, at ``now``: default the current
    time); :data:`NOT_GRADED` where autograding did not finish), the total, the maximum, the points lost for
    lateness, how many answers still wait for grading by hand (in the Formgrader), whether the total is provisional
    (answers wait), and notes: each late hand-in (how late, score - penalty = final), the problems that kept a
    hand-in from being graded (a missing or unreadable notebook), what collect refused (a hand-in in another's name,
    one dated in the future) and each missing hand-in (its due date and extension). ``marks``, if given, gets
    (student, assignment) -> "*" (provisional), "L" (late) or "*L". ``term``: the course's :class:`.term.Term`
    (default: its configuration's).
    """
    term = term or course_term(course)
    with Gradebook(db_url) as gb:
        graded = [a for a in assignments if any(x.name == a for x in gb.assignments)]
        maxima = {a: gb.find_assignment(a).max_score for a in graded}
        duedates = {a: gb.find_assignment(a).duedate for a in graded}
        now = now or utc_now()
        rows = []
        notebooks = {a: [nb.name for nb in gb.find_assignment(a).notebooks] for a in graded}
        refused = {a: trust.refusals(course, a) for a in graded}  # hand-ins collect would not take
        for student in sorted(gb.students, key=lambda s: s.id):
            row, total, lost, pending, notes = [student.id], 0.0, 0.0, 0, []
            for a in graded:
                notes += [f"{a}: {p}" for p in submission_problems(course, student.id, a, notebooks[a])]
                notes += [f"{a}: {p}" for p in refused[a].get(student.id, [])]
                try:
                    submission = gb.find_submission(a, student.id)
                except MissingEntry:
                    cell, note = not_handed_in(term, course, student.id, a, duedates[a], now)
                    row.append(cell)  # a missing hand-in adds 0 to the total
                    notes += [note] if note else []
                    continue
                if not autograded(submission):
                    row.append(NOT_GRADED)
                    continue
                held = standing(submission, term)
                row.append(held.final)
                total, lost, pending = total + held.final, lost + held.penalty, pending + held.pending
                if held.seconds_late > 0:
                    notes.append(f"{a}: {held.late_text()}, {held.score:g} - {held.penalty:g} = {held.final:g}")
                if marks is not None:
                    marks[(student.id, a)] = ("*" if held.provisional else "") + ("L" if held.penalty else "")
            rows.append(row + [round(total, 2), sum(maxima.values()), round(lost, 2), pending,
                               "yes" if pending else "", "; ".join(notes)])
    for name in unusable_folders(course):
        rows.append([ascii(name)] + [""] * len(graded) + ["", sum(maxima.values()), "", 0, "",
                     "not graded: the folder name is not a plain student id (letters, digits, _ . @ + -); "
                     "rename it and autograde again"])
    header = ["student", *(f"{a} (/{maxima[a]:g})" for a in graded), "total", "max", "late penalty",
              "to grade by hand", "provisional", "notes"]
    return header, rows


#: The columns a Canvas gradebook import needs before the assignments' (Canvas matches students by
#: "SIS Login ID", or "ID", Canvas's own user id, when an instructor has put it into nbgrader).
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


class Provisional(Exception):
    """Scores that wait for grading by hand, which the Canvas export refuses unless asked for them."""

    def __init__(self, waiting: list[str]):
        self.waiting = waiting
        super().__init__(f"{len(waiting)} score(s) still wait for answers to grade by hand")


def canvas_table(db_url: str, assignments: list[str], course: Path = ROOT, provisional: bool = False,
                 term=None, missing_zero: bool = True, now=None) -> tuple[list[str], list[list]]:
    """Final scores (after late penalties) in the layout of Canvas's gradebook import: the student columns, one
    column per assignment (new assignments to Canvas, named by their id), a "Points Possible" row first.
    A hand-in that never came gets 0 once it is :data:`MISSING` (after the student's deadline, :func:`not_handed_in`
    at ``now``; the usual LMS convention), or a blank cell if not ``missing_zero``; a blank cell, which Canvas leaves
    unchanged, before the deadline, without a due date, and where autograding did not finish. A score with answers
    still to grade by hand raises :class:`Provisional` (naming them) unless ``provisional``: Canvas would show it as
    a final grade."""
    term = term or course_term(course)
    waiting = []
    with Gradebook(db_url) as gb:
        graded = [a for a in assignments if any(x.name == a for x in gb.assignments)]
        maxima = [gb.find_assignment(a).max_score for a in graded]
        duedates = {a: gb.find_assignment(a).duedate for a in graded}
        now = now or utc_now()
        rows = [["Points Possible", "", "", "", ""] + [f"{m:g}" for m in maxima]]
        for student in sorted(gb.students, key=lambda s: s.id):
            name = ", ".join(p for p in (student.last_name, student.first_name) if p) or student.id
            row = [name, student.lms_user_id or "", student.id, student.id, ""]
            for a in graded:
                try:
                    submission = gb.find_submission(a, student.id)
                except MissingEntry:
                    cell, _ = not_handed_in(term, course, student.id, a, duedates[a], now)
                    row.append("0" if cell == MISSING and missing_zero else "")
                    continue
                if not autograded(submission):
                    row.append("")
                    continue
                held = standing(submission, term)
                if held.provisional:
                    waiting.append(f"{student.id}/{a}")
                row.append(f"{held.final:g}")
            rows.append(row)
    if waiting and not provisional:
        raise Provisional(waiting)
    return CANVAS_COLUMNS + graded, rows


def printable(header: list[str], rows: list[list], marks: dict) -> str:
    """:func:`score_table` as the terminal shows it: short assignment headers ("01 /95"), each score marked "*"
    (answers wait for grading by hand: provisional) or "L" (after a late penalty), a legend (of those marks, and of
    :data:`MISSING` and :data:`NOT_YET_DUE` where a cell says it), and the notes under the table instead of a column,
    so that the table stays narrow."""
    first = header.index("total")
    names = [re.sub(r"^(\d+)_.*\(/(.*)\)$", r"\1 /\2", h) for h in header[1:first]]
    ids = [h.split(" ", 1)[0] for h in header[1:first]]
    short = ["student", *names, f"total /{rows[0][first + 1]:g}" if rows else "total", "late", "by hand"]
    body = []
    for row in rows:
        scores = [f"{v:g}{marks.get((row[0], a), '')}" if isinstance(v, (int, float)) else str(v)
                  for v, a in zip(row[1:first], ids)]
        total = row[first]
        body.append([row[0], *scores, f"{total:g}" if isinstance(total, (int, float)) else str(total),
                     f"-{row[first + 2]:g}" if row[first + 2] else "", str(row[first + 3] or "")])
    text = format_table(short, body)
    legend, said = [], {str(v) for row in rows for v in row[1:first]}
    if any(marks.values()):
        legend += ["*  provisional: answers still wait for grading by hand (Formgrader); the score will rise",
                   "L  after a late penalty (grades.csv and the notes below say how late and how much)"]
    if MISSING in said:
        legend.append(f"{MISSING}: not handed in by the deadline (extension included): counts 0 in the total; the "
                      "notes give the due date")
    if NOT_YET_DUE in said:
        legend.append(f"{NOT_YET_DUE}: not handed in yet; the deadline (extension included) is still to come")
    if legend:
        text += "\n\n" + "\n".join(legend)
    notes = [f"  {row[0]}: {note}" for row in rows for note in str(row[-1]).split("; ") if note]
    if notes:
        text += "\n\nNotes:\n" + "\n".join(notes)
    return text


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def format_table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
