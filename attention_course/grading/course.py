"""Facts about this course that the tooling shares: assignments, folders, the gradebook."""

from __future__ import annotations

import csv
import os
import re
import shutil
from pathlib import Path

from ..nbgrader_settings import COURSE_ID  # noqa: F401  (the course's id in nbgrader, kept where students' nbgrader reads it)
from . import trust

#: An assignment is a folder of ``source/`` named ``<two digits>_<name>``; the digits give the teaching order.
ASSIGNMENT_NAME = re.compile(r"\d\d_\w+")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "attention_course"


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
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

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
    import json

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


def cell_scores(db_url: str, assignment: str) -> dict:
    """Every graded cell of every submission: student -> {grade cell: (score, max, needs manual grade)}."""
    from nbgrader.api import Gradebook

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
    from datetime import datetime, timezone

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
    from nbgrader.api import Gradebook, MissingEntry

    from .term import course_term, standing

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
    from nbgrader.api import Gradebook, MissingEntry

    from .term import course_term, standing

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
