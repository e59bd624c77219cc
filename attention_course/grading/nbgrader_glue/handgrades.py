"""Hand grades that outlive every regrade: a written answer graded by hand keeps its grade while its text is the same.

Stock nbgrader's ``SaveAutoGrades`` marks every cell with a manual score "to grade" again at each autograde, so a
resubmission, a test fixed after the release or a forced regrade would send every written answer of the hand-in
back to the graders. The course keeps, per written answer (a graded solution cell) of each hand-in, one row of
:class:`HandGrade` in the gradebook itself (a table of its own beside nbgrader's, made by nbgrader's own
``create_all``, so SQLite and PostgreSQL alike, and every process that opens the gradebook):

* ``answer``: a digest of the answer's text as the last autograde saw it (:func:`answer_digest`: its source, line
  ends and surrounding blank space aside, and its attachments);
* ``graded``: the digest of the text the manual score was given to, recorded whenever a manual score is set,
  whoever sets it (the Formgrader's API, the question pages, a script: an attribute event on ``Grade.manual_score``);
* ``ticks``: which lines of the mark scheme the grader ticked (the question page stores them, and shows them on
  reload);
* ``previous_*``: the score, comment and ticks of a graded answer whose text changed, shown beside it on the
  question page while it waits to be graded again.

:class:`KeepHandGrades` runs in every autograde right after ``SaveAutoGrades`` (``make autograde`` local or on
Dask, the grading service, stock ``nbgrader autograde``, the Formgrader's): an answer with a manual score whose
text is the one graded is graded still (``needs_manual_grade`` back to False: score, comment and ticks kept); one
whose text changed is "to grade" again, its old score, comment and ticks moved to ``previous_*``.
A manual score given before this table existed has no ``graded`` digest: its answer is marked to grade again once,
with the old score shown as the previous one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

from nbgrader.api import Base, Comment, Grade, Gradebook, SolutionCell
from nbgrader.preprocessors import NbGraderPreprocessor
from sqlalchemy import Column, DateTime, Float, Integer, String, Text, UniqueConstraint, event
from sqlalchemy.orm import object_session

from .speedups import rows_by_cell


class HandGrade(Base):
    """What a grader did to one written answer of one hand-in, and the text it was done to."""

    __tablename__ = "course_hand_grade"
    __table_args__ = (UniqueConstraint("course", "assignment", "notebook", "cell", "student"),)

    id = Column(Integer, primary_key=True)
    course = Column(String(128), nullable=False)
    assignment = Column(String(128), nullable=False)
    notebook = Column(String(128), nullable=False)
    cell = Column(String(128), nullable=False)
    student = Column(String(128), nullable=False)
    answer = Column(String(64))  # digest of the text autograde last saw
    graded = Column(String(64))  # digest of the text the manual score was given to
    ticks = Column(Text)  # JSON list of the mark scheme's line numbers (marking.Question.lines) ticked
    previous_score = Column(Float)
    previous_comment = Column(Text)
    previous_ticks = Column(Text)
    changed_at = Column(DateTime)  # when the text last changed under a manual score (UTC)


def answer_digest(cell: dict) -> str:
    """A digest of a written answer's text: the source with line ends made one and blank space around it removed,
    and its attachments (images pasted into it)."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    text = "\n".join(line.rstrip() for line in source.replace("\r\n", "\n").replace("\r", "\n").strip().split("\n"))
    attachments = json.dumps(cell.get("attachments") or {}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8") + b"\0" + attachments.encode("utf-8")).hexdigest()


def row_of(session, course: str, assignment: str, notebook: str, cell: str, student: str,
           create: bool = True) -> HandGrade | None:
    """The row of one answer (made, unsaved, when ``create`` and there is none)."""
    with session.no_autoflush:
        row = session.query(HandGrade).filter_by(course=course, assignment=assignment, notebook=notebook, cell=cell,
                                                 student=student).one_or_none()
    if row is None and create:
        row = HandGrade(course=course, assignment=assignment, notebook=notebook, cell=cell, student=student)
        session.add(row)
    return row


def row_of_grade(session, grade, create: bool = True) -> HandGrade | None:
    """The row of a gradebook ``Grade`` (nbgrader's), found through its notebook, assignment and student."""
    notebook = grade.notebook
    assignment = notebook.assignment
    return row_of(session, assignment.assignment.course_id, assignment.assignment.name, notebook.notebook.name,
                  grade.cell.name, assignment.student.id, create)


def rows_for(session, course: str, assignment: str, notebook: str, cell: str) -> dict[str, HandGrade]:
    """student id -> row, for one question of one assignment."""
    with session.no_autoflush:
        found = session.query(HandGrade).filter_by(course=course, assignment=assignment, notebook=notebook,
                                                   cell=cell).all()
    return {r.student: r for r in found}


def read_ticks(text: str | None) -> list[int]:
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return sorted({t for t in found if isinstance(t, int) and not isinstance(t, bool) and t >= 0}) if isinstance(
        found, list) else []


def remember_manual_score(target, value, oldvalue, initiator):
    """``Grade.manual_score`` is being set: a score records the answer's text it was given to; clearing it clears
    that and the ticks. Runs for whoever sets it (an attribute event, installed by :mod:`.patches`)."""
    session = object_session(target)
    if session is None or target.cell is None or target.notebook is None or not _written(target):
        return value
    row = row_of_grade(session, target)
    row.graded = None if value is None else row.answer
    if value != oldvalue:  # ticks belong to the score they add up: the question page stores them after it
        row.ticks = None
    return value


def _written(grade) -> bool:
    """Whether a gradebook grade is that of an answer graded by hand (a graded solution cell)."""
    cell = grade.cell
    session_cells = cell.notebook.solution_cells if cell.notebook is not None else []
    return any(isinstance(s, SolutionCell) and s.name == cell.name for s in session_cells)


class KeepHandGrades(NbGraderPreprocessor):
    """Autograde step, right after ``SaveAutoGrades``: every written answer graded by hand whose text is the one it
    was graded on stays graded; one whose text changed waits for a grader again, its old grade shown beside it."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            notebook = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            grades, comments = named_rows(gb.db, Grade, notebook.id), named_rows(gb.db, Comment, notebook.id)
            course = notebook.assignment.assignment.course_id
            for cell in nb.cells:
                meta = cell.get("metadata", {}).get("nbgrader", {})
                name = meta.get("grade_id")
                grade = grades.get(name)
                if not (meta.get("grade") and meta.get("solution")) or grade is None:
                    continue
                row = row_of(gb.db, course, info["assignment"], info["notebook"], name, info["student"])
                row.answer = answer_digest(cell)
                gb.db.flush()  # found again by the event below
                if grade.manual_score is None:
                    continue
                if row.graded is not None and row.graded == row.answer:
                    grade.needs_manual_grade = False
                    continue
                comment = comments.get(name)
                row.previous_score, row.previous_ticks = grade.manual_score, row.ticks
                row.previous_comment = comment.manual_comment if comment is not None else None
                row.changed_at = datetime.now(timezone.utc).replace(tzinfo=None)
                grade.manual_score = None  # the event clears ``graded`` and ``ticks``
                if comment is not None:
                    comment.manual_comment = None
                grade.needs_manual_grade = grade.auto_score is None
                self.log.info("%s/%s %s: the answer changed since it was graded (%g): to grade again",
                              info["student"], info["assignment"], name, row.previous_score)
            gb.db.commit()
        return nb, resources


def named_rows(db, model, notebook_id: str) -> dict:
    """A submitted notebook's grades (``model`` :class:`Grade`) or comments (:class:`Comment`) by their cell's name,
    in one query (``notebook.grades`` loads each row's cell again, one query a row)."""
    found = rows_by_cell(db, model, lambda query: query.filter(model.notebook_id == notebook_id))
    return {name: row for (name, _), rows in found.items() for row in rows}


def install_events() -> None:
    """Record the answer's text whenever a manual score is set (called once by :mod:`.patches`)."""
    event.listen(Grade.manual_score, "set", remember_manual_score, retval=True)
