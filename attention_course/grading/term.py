"""The term: due dates, the late policy and extensions, set in one place (``c.Term`` in ``nbgrader_config.py``,
extensions in a CSV the instructor edits), and applied by nbgrader's own late-submission step.

* :class:`ApplyTerm` (an autograde step before ``AssignLatePenalties``) writes the assignment's due date and the
  student's extension into the gradebook, so every way of grading (``make autograde``, stock ``nbgrader
  autograde``, the Formgrader, a Dask cluster's client) sees the same deadline.
* :class:`LatePolicy` (``AssignLatePenalties.plugin_class``) is the penalty: a share of the score for each day or
  part of a day late, capped.
* :func:`standing` is what the grade table, the CSVs, the report and the feedback page show of a hand-in: score,
  late penalty (the policy on the score as it is now, written answers graded by hand after autograde included, and
  on the term as it is now, an extension granted since included), final score, and whether answers still wait for
  grading by hand.

The time a hand-in is late by is the gradebook's, which autograde takes from ``submitted/<student>/<id>/
timestamp.txt``: written by collect at the time the grader trusts (the latest change of anything in its copy of
the inbound folder), or by the
instructor for a hand-in copied in by hand; without one, the notebooks' modification time (said in the log).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict, Float, Unicode
from traitlets.config import Configurable


class Term(Configurable):
    """The course's deadlines and late policy (``c.Term.<name>`` in nbgrader_config.py)."""

    due = Dict(help="Assignment id -> due date with its zone, as nbgrader reads it: "
                    "'2026-12-04 17:00:00 Europe/London' or '2026-12-04T17:00:00+00:00'. "
                    "An assignment without one has no deadline.").tag(config=True)
    late_share_per_day = Float(0.1, help="Share of the score lost for each day, or part of a day, late.").tag(
        config=True)
    late_cap = Float(0.5, help="The largest share of the score a late hand-in loses.").tag(config=True)
    extensions = Unicode("extensions.csv", help="A CSV of extensions (columns student, assignment, days; days may "
                                                "be fractional), relative to the course folder.").tag(config=True)

    def due_date(self, assignment: str) -> datetime | None:
        """The due date of ``assignment`` in UTC, without its zone (as nbgrader stores it), or None."""
        from nbgrader.utils import parse_utc

        text = self.due.get(assignment)
        if not text:
            return None
        return parse_utc(_zoned(assignment, str(text)))

    def check(self) -> None:
        """Stop with a clear message where a due date or the extensions CSV cannot be read (before any grading)."""
        try:
            for assignment in self.due:
                self.due_date(assignment)
            self.extension("", "")
        except ValueError as exc:
            raise SystemExit(f"The term in nbgrader_config.py: {exc}") from None

    def extension(self, student: str, assignment: str) -> timedelta | None:
        """The student's extension of ``assignment`` in the extensions CSV (read once per Term), or None."""
        if not hasattr(self, "_extensions"):
            self._extensions = read_extensions(Path(self.extensions))
        return self._extensions.get((student, assignment))

    def deadline(self, student: str, assignment: str, fallback: datetime | None = None) -> datetime | None:
        """The student's deadline of ``assignment`` in UTC, without its zone: its due date here (else ``fallback``,
        the gradebook's, set in the Formgrader) plus their extension; None without a due date."""
        due = self.due_date(assignment) or fallback
        if due is None:
            return None
        return due + (self.extension(student, assignment) or timedelta(0))

    def seconds_late(self, submission) -> float:
        """How late a gradebook submission (nbgrader's ``SubmittedAssignment``) was handed in, by the term as it is
        now (:meth:`deadline`)."""
        due = self.deadline(submission.student.id, submission.assignment.name, submission.assignment.duedate)
        if due is None or submission.timestamp is None:
            return 0.0
        return max(0.0, (submission.timestamp - due).total_seconds())

    def penalty(self, score: float, seconds_late: float) -> float:
        """The points a hand-in ``seconds_late`` seconds late loses of ``score``."""
        if seconds_late <= 0 or score <= 0:
            return 0.0
        share = min(self.late_cap, self.late_share_per_day * math.ceil(seconds_late / 86400))
        return round(score * max(0.0, share), 2)


def _zoned(assignment: str, text: str) -> str:
    """``text`` if it is a date with a zone nbgrader reads; else a clear stop (nbgrader itself would take a date
    without a zone, or with a zone name it does not know, as UTC without a word)."""
    import dateutil.parser
    import dateutil.tz

    parts = text.split(" ")
    zone = parts[2] if len(parts) == 3 else None
    try:
        if zone is not None:
            known = zone.lstrip("+-").isdigit() or dateutil.tz.gettz(zone) is not None
            dateutil.parser.parse(" ".join(parts[:2]))
        else:
            known = dateutil.parser.isoparse(text).tzinfo is not None
    except (ValueError, OverflowError):
        known = False
    if not known:
        raise ValueError(f"c.Term.due[{assignment!r}] = {text!r}: give the date with its zone, for example "
                         "'2027-01-22 17:00:00 Europe/London' or '2027-01-22T17:00:00+00:00'")
    return text


def read_extensions(path: Path) -> dict[tuple[str, str], timedelta]:
    """(student, assignment) -> extension, from the instructor's CSV (absent: none). A malformed row raises
    ValueError with the row's number."""
    if not path.is_file():
        return {}
    found = {}
    with open(path, newline="", encoding="utf-8") as f:
        for number, row in enumerate(csv.DictReader(f), start=2):
            try:
                student, assignment = row["student"].strip(), row["assignment"].strip()
                days = float(row["days"])
            except (KeyError, AttributeError, TypeError, ValueError):
                raise ValueError(f"{path}, line {number}: an extension needs student, assignment and days "
                                 f"(a number), got {dict(row)}") from None
            found[(student, assignment)] = timedelta(days=days)
    return found


class ApplyTerm(NbGraderPreprocessor):
    """Autograde step: the assignment's due date and this student's extension, from :class:`Term`, into the
    gradebook before ``AssignLatePenalties`` reads them."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        term = Term(parent=self)
        with Gradebook(info["db_url"]) as gb:
            due = term.due_date(info["assignment"])
            if due is not None:  # else the gradebook's own (the Formgrader's), if any
                gb.find_assignment(info["assignment"]).duedate = due
            gb.find_submission(info["assignment"], info["student"]).extension = term.extension(
                info["student"], info["assignment"])
            gb.db.commit()
        return nb, resources


class LatePolicy(LateSubmissionPlugin):
    """nbgrader's late-penalty plugin with the course's policy (:meth:`Term.penalty`)."""

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float:
        return Term(parent=self).penalty(score, total_seconds_late)


@dataclass
class Standing:
    """What the course shows of one graded hand-in."""

    score: float          # every grade so far, before the penalty
    penalty: float        # points lost for lateness (the policy on ``score``)
    seconds_late: float
    pending: int          # answers still to grade by hand

    @property
    def final(self) -> float:
        return round(self.score - self.penalty, 2)

    @property
    def provisional(self) -> bool:
        return self.pending > 0

    def late_text(self) -> str:
        """How late, in words ("" when on time)."""
        return late_words(self.seconds_late)


def late_words(seconds: float) -> str:
    """``seconds`` late in words ("" when on time): minutes, hours, or days from two days up."""
    if seconds <= 0:
        return ""
    hours = seconds / 3600
    return f"{hours / 24:.1f} days late" if hours >= 48 else f"{hours:.1f} hours late" if hours >= 1 else \
        f"{seconds / 60:.0f} minutes late"


def standing(submission, term: Term) -> Standing:
    """The standing of a gradebook submission (an nbgrader ``SubmittedAssignment``)."""
    pending = sum(1 for nb in submission.notebooks for g in nb.grades if g.needs_manual_grade)
    late = term.seconds_late(submission)
    return Standing(score=round(submission.score, 2), penalty=term.penalty(submission.score, late),
                    seconds_late=late, pending=pending)


def course_term(course: Path) -> Term:
    """The course's :class:`Term`, as its ``nbgrader_config.py`` sets it."""
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    except Exception:  # the course's configuration has been loaded by nbgrader already where it matters
        config = None
    term = Term(config=config) if config is not None else Term()
    if not Path(term.extensions).is_absolute():
        term.extensions = str(Path(course) / term.extensions)
    return term
