"""A regrade reaches the student: every hand-in whose score a run changed gets its page again, named as a change.

``make autograde`` (:func:`.autograde.run`) takes each hand-in's cell scores before and after the run; for every
hand-in of the run whose total changed:

* :func:`record` keeps the change in the gradebook (:class:`Regrade`, a table of the course's beside nbgrader's):
  when, why (a test corrected in ``source/``, a new hand-in, the grading itself changed, or graded again on
  request), the totals before and after and each cell whose score moved;
* :func:`reach` writes the hand-in's feedback page again where one was written before (``feedback/``), and
  releases it where the student already had one (a page under her hand-in's name in the exchange's ``feedback/``,
  released by the instructor or by the grading service, or a page of an earlier hand-in of hers released by
  ``release_feedback``: :class:`ReleasedPage`), so her Assignment List shows the feedback as updated;
  it prints whom it reached and whose page waits for the instructor's own release.

The page names the change at its top ("A test was corrected on 28 Nov 2026: 65 -> 61; test_softmax_values 10 -> 6"),
from the rows of :func:`changes_of` for the hand-in it shows (its ``handin`` time): never from anything the kernel
sent.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Base, Gradebook, MissingEntry
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
from nbgrader.utils import notebook_hash
from sqlalchemy import Column, DateTime, Float, Integer, String, Text, UniqueConstraint

from .. import trust
from ..course import exchange_root

#: Why a run changed a hand-in's score, as its page says it.
REASONS = {
    "tests": "A test was corrected",
    "handin": "Your new hand-in replaced your earlier one",
    "grading": "The grading of this assignment was corrected",
    "again": "Your hand-in was graded again",
}


class Regrade(Base):
    """One change of a hand-in's score by a run that graded it again."""

    __tablename__ = "course_regrade"

    id = Column(Integer, primary_key=True)
    course = Column(String(128), nullable=False)
    assignment = Column(String(128), nullable=False)
    student = Column(String(128), nullable=False)
    handin = Column(String(64))  # the hand-in's time in the gradebook (UTC, ISO), as graded after the change
    at = Column(DateTime, nullable=False)  # when (UTC)
    reason = Column(String(16), nullable=False)  # a key of REASONS
    before = Column(Float, nullable=False)
    after = Column(Float, nullable=False)
    cells = Column(Text)  # JSON [[grade id, before, after], ...]


class ReleasedPage(Base):
    """A student was given a page of an assignment (``release_feedback``): a later hand-in's page reaches her too."""

    __tablename__ = "course_released_page"
    __table_args__ = (UniqueConstraint("course", "assignment", "student"),)

    id = Column(Integer, primary_key=True)
    course = Column(String(128), nullable=False)
    assignment = Column(String(128), nullable=False)
    student = Column(String(128), nullable=False)
    at = Column(DateTime, nullable=False)


def mark_released(db_url: str, course_id: str, assignment: str, students) -> None:
    """Remember that these students were given a page of ``assignment`` (called by the course's release_feedback)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    with Gradebook(db_url, course_id) as gb:
        for student in sorted(set(students)):
            row = gb.db.query(ReleasedPage).filter_by(course=course_id, assignment=assignment,
                                                      student=student).one_or_none()
            if row is None:
                gb.db.add(ReleasedPage(course=course_id, assignment=assignment, student=student, at=now))
            else:
                row.at = now
        gb.db.commit()


def had_released(db_url: str, course_id: str, assignment: str, student: str) -> bool:
    with Gradebook(db_url, course_id) as gb:
        return gb.db.query(ReleasedPage).filter_by(course=course_id, assignment=assignment,
                                                   student=student).first() is not None


def snapshot(db_url: str, course_id: str, assignments) -> dict:
    """``(assignment, student) -> (hand-in time, {grade id: score})`` of every hand-in of ``assignments``."""
    found = {}
    with Gradebook(db_url, course_id) as gb:
        for a in assignments:
            try:
                submissions = gb.assignment_submissions(a)
            except MissingEntry:
                continue
            for sub in submissions:
                found[(a, sub.student.id)] = (_when(sub.timestamp),
                                              {g.name: float(g.score or 0) for nb in sub.notebooks for g in nb.grades})
    return found


def _when(timestamp) -> str:
    return timestamp.isoformat() if timestamp is not None else ""


def record(db_url: str, course_id: str, before: dict, after: dict, why: dict) -> list[Regrade]:
    """Keep every change of a hand-in's total between two :func:`snapshot` s; ``why``: assignment -> reason (a key
    of :data:`REASONS`) for a hand-in that is the same one (a new hand-in is "handin"). Returns the rows made."""
    made = []
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    with Gradebook(db_url, course_id) as gb:
        for key, (handin, cells) in sorted(after.items()):
            if key not in before:
                continue
            old_handin, old_cells = before[key]
            old, new = sum(old_cells.values()), sum(cells.values())
            if abs(new - old) <= 1e-9:
                continue
            moved = [[name, old_cells.get(name, 0.0), score] for name, score in sorted(cells.items())
                     if abs(score - old_cells.get(name, 0.0)) > 1e-9]
            reason = "handin" if handin != old_handin else why.get(key[0], "again")
            row = Regrade(course=course_id, assignment=key[0], student=key[1], handin=handin, at=now, reason=reason,
                          before=round(old, 4), after=round(new, 4), cells=json.dumps(moved))
            gb.db.add(row)
            made.append(row)
        gb.db.commit()
        for row in made:
            gb.db.refresh(row)
            gb.db.expunge(row)
    return made


def sentence(row: Regrade) -> str:
    """The change as the student's page says it."""
    try:
        moved = json.loads(row.cells or "[]")
    except ValueError:
        moved = []
    cells = "; ".join(f"{name} {old:g} -> {new:g}" for name, old, new in moved[:8])
    more = f" and {len(moved) - 8} more" if len(moved) > 8 else ""
    return (f"{REASONS.get(row.reason, REASONS['again'])} on {row.at:%d %b %Y}: {row.before:g} -> {row.after:g}"
            + (f" ({cells}{more})" if cells else "") + ".")


def changes_of(gb, submission) -> list[str]:
    """The changes of one hand-in (nbgrader's ``SubmittedAssignment``, as graded now), newest first, as
    :func:`sentence` s."""
    rows = (gb.db.query(Regrade).filter_by(course=submission.assignment.course_id, assignment=submission.assignment.name,
                                           student=submission.student.id, handin=_when(submission.timestamp))
            .order_by(Regrade.at.desc(), Regrade.id.desc()).limit(5).all())
    return [sentence(r) for r in rows]


def after_run(course: Path, db_url: str, course_id: str, before: dict, todo, failed, refreshed, force: bool,
              stream=sys.stderr) -> dict:
    """After ``make autograde``: record the changes of the hand-ins it graded (``todo``, its jobs, less the
    ``failed`` labels) since :func:`snapshot` ``before``, and :func:`reach` their students."""
    assignments = sorted({a for a, _ in before} | {j.assignment for j in todo})
    why = {a: "tests" if a in (refreshed or ()) else "again" if force else "grading" for a in assignments}
    graded = {(j.assignment, j.student) for j in todo} - {tuple(label.split("/", 1)) for label in failed}
    after = {k: v for k, v in snapshot(db_url, course_id, assignments).items() if k in graded}
    return reach(course, record(db_url, course_id, before, after, why), stream)


def released_page(course: Path, assignment: str, student: str, exchange_feedback: Path) -> bool:
    """Whether the student has a released page of this hand-in: under the name her fetch_feedback asks for (from
    the secret of the hand-in as collected), in the exchange's feedback folder."""
    secret = (trust.read_small(course / "submitted" / student / assignment / "submission_secret.txt", 256) or "").strip()
    if not secret:
        return False
    notebooks = [p.stem for p in (course / "autograded" / student / assignment).glob("*.ipynb")]
    return any((exchange_feedback / f"{notebook_hash(secret=secret, notebook_id=nb)}.html").is_file()
               for nb in notebooks)


def reach(course: Path, rows: list[Regrade], stream=sys.stderr) -> dict:
    """Write again the page of every changed hand-in that had one, and release it where the student had a page;
    returns ``{"released": [...], "written": [...], "failed": [...]}`` (``assignment/student``) and says so."""
    done = {"released": [], "written": [], "failed": []}
    todo = sorted({(r.assignment, r.student) for r in rows})
    if not todo:
        return done
    app = NbGrader()
    app.initialize([])
    app.log.setLevel("ERROR")
    api = NbGraderAPI(parent=app)
    api.log.setLevel("ERROR")

    outbound = Path(exchange_root(course)) / api.coursedir.course_id / "feedback"
    for assignment, student in todo:
        label = f"{assignment}/{student}"
        had_page = any((course / "feedback" / student / assignment).glob("*.html"))
        released = released_page(course, assignment, student, outbound) or had_released(
            api.coursedir.db_url, api.coursedir.course_id, assignment, student)
        if not (had_page or released):
            continue
        made = api.generate_feedback(assignment, student, force=True)
        if not made.get("success"):
            done["failed"].append(label)
            continue
        if released:
            sent = api.release_feedback(assignment, student)
            (done["released"] if sent.get("success") else done["failed"]).append(label)
        else:
            done["written"].append(label)
    if done["released"]:
        stream.write(f"Feedback updated and released to the student ({len(done['released'])}, their pages name the "
                     f"change): {', '.join(done['released'])}\n")
    if done["written"]:
        stream.write(f"Feedback written again, not released (no page of theirs was released yet: `nbgrader "
                     f"release_feedback` when ready): {', '.join(done['written'])}\n")
    if done["failed"]:
        stream.write(f"Feedback NOT updated (see `nbgrader generate_feedback <id> --student <id>`): "
                     f"{', '.join(done['failed'])}\n")
    return done
