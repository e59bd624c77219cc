"""The term: due dates, the late policy and extensions, set in one place (``c.Term`` in ``nbgrader_config.py``,
extensions in a CSV the instructor edits), and applied by nbgrader's own late-submission step.

* :class:`ApplyTerm` (an autograde step before ``AssignLatePenalties``) writes the assignment's due date and the
  student's extension into the gradebook, so every way of grading (``make autograde``, stock ``nbgrader
  autograde``, the Formgrader, a Dask cluster's client) sees the same deadline.
* :class:`ReleaseDueDate` (the last step of ``generate_assignment``) writes the due date into the gradebook at the
  release too (the Formgrader lists it from then on) and states it in a cell at the top of each released notebook;
  :func:`due_date_at_exchange_release` (``release_assignment``, installed by :mod:`.patches`) writes it again
  and warns when ``release/`` states another date. nbgrader's Assignment List cannot show a due date (its JupyterLab
  extension renders the assignment's name, course, notebooks and hand-in times only), so the notebook says it and
  the student's feedback page gives her own deadline (:func:`deadline_sentences`): the extensions never leave the
  instructor's side except on the page of the student they belong to.
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
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dateutil.parser
import dateutil.tz
from nbformat.v4 import new_markdown_cell
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import parse_utc
from traitlets import Dict, Float, Unicode
from traitlets.config import Configurable
from traitlets.config.loader import PyFileConfigLoader

from ..errors import ConfigError


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
        text = self.due.get(assignment)
        if not text:
            return None
        return parse_utc(_zoned(assignment, str(text)))

    def due_words(self, assignment: str, fallback: datetime | None = None, extension: timedelta | None = None) -> str:
        """The due date of ``assignment`` (plus ``extension``) for people, in the zone ``c.Term.due`` gives it in
        (else ``fallback``, the gradebook's, in UTC); "" without a due date."""
        due = self.due_date(assignment)
        zone, label = _zone_of(str(self.due[assignment])) if due is not None else (None, "UTC")
        due = due or fallback
        if due is None:
            return ""
        return when_words(due + (extension or timedelta(0)), zone, label)

    def check(self) -> None:
        """Stop with a clear message where a due date or the extensions CSV cannot be read (before any grading)."""
        try:
            for assignment in self.due:
                self.due_date(assignment)
            self.extension("", "")
        except ValueError as exc:
            raise ConfigError(f"The term in nbgrader_config.py: {exc}") from None

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
    if zone is not None and zone.lstrip("+-").isdigit():  # nbgrader reads "+0100" there as 100 seconds
        raise ValueError(f"c.Term.due[{assignment!r}] = {text!r}: nbgrader reads a number after the time as seconds, "
                         "not hours: give the offset in the ISO form, for example '2027-01-22T17:00:00+01:00'")
    return text


def _zone_of(text: str):
    """The zone a due date of ``c.Term.due`` (checked by :func:`_zoned`) is written in, and its name for people."""
    parts = text.split(" ")
    if len(parts) == 3:
        return dateutil.tz.gettz(parts[2]), parts[2]
    zone = dateutil.parser.isoparse(text).tzinfo
    minutes = round(zone.utcoffset(None).total_seconds() / 60)
    sign = "+" if minutes >= 0 else "-"
    return zone, f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}" if minutes else "UTC"


def when_words(moment: datetime, zone=None, label: str = "UTC") -> str:
    """``moment`` (UTC, without its zone, as nbgrader stores it) for people, in ``zone`` (named ``label``):
    "Friday 22 January 2027, 17:00 (Europe/London)"."""
    local = moment.replace(tzinfo=timezone.utc).astimezone(zone or timezone.utc)
    return f"{local:%A} {local.day} {local:%B %Y}, {local:%H:%M} ({label})"


def span_words(span: timedelta) -> str:
    """An extension in words: "3 days", "1.5 days", "1 day", "12 hours"."""
    days = span.total_seconds() / 86400
    if abs(days) < 1:
        hours = round(days * 24, 1)
        return f"{hours:g} hour{'' if hours == 1 else 's'}"
    days = round(days, 2)
    return f"{days:g} day{'' if days == 1 else 's'}"


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


#: The key, in the metadata of the cell :class:`ReleaseDueDate` puts at the top of a released notebook, of the due
#: date it states (ISO, UTC).
DUE_CELL = "attention_course_due"


def due_cell(term: Term, assignment: str):
    """The released notebook's first cell: the assignment's due date (None without one)."""
    due = term.due_date(assignment)
    if due is None:
        return None
    cell = new_markdown_cell(
        f"**Due: {term.due_words(assignment)}**\n\n"
        "This is the due date as it was when this notebook was released. If you were given an extension, your own "
        "deadline is later: your feedback page states it.",
        metadata={"editable": False, "deletable": False, DUE_CELL: due.isoformat()})
    cell.id = "due-date"  # the same in every release, as the master's own cells' ids
    return cell


def stated_due(path: Path) -> str | None:
    """The due date a released notebook states in its :func:`due_cell` (ISO, UTC), or None."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return None
    return next((c["metadata"][DUE_CELL] for c in cells[:1] if DUE_CELL in c.get("metadata", {})), None)


class ReleaseDueDate(NbGraderPreprocessor):
    """Release step (``generate_assignment``, last): the assignment's due date from :class:`Term` into the gradebook,
    so that the Formgrader lists it from the release on (a later release or autograde puts a changed one in), and
    stated in a cell at the top of the student's notebook. Without a due date in ``c.Term.due`` the gradebook keeps
    its own (the Formgrader's), if any, and the notebook states none."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        term = Term(parent=self)
        cell = due_cell(term, info["assignment"])
        if cell is not None:
            with Gradebook(info["db_url"]) as gb:
                gb.find_assignment(info["assignment"]).duedate = term.due_date(info["assignment"])
                gb.db.commit()
            nb.cells.insert(0, cell)
        return nb, resources


def due_date_at_exchange_release(release) -> None:
    """``nbgrader release_assignment`` (``release``: nbgrader's ``ExchangeReleaseAssignment``, after its copy): the
    due date of ``c.Term.due`` into the gradebook, and a warning for each notebook of ``release/`` that states
    another date, or none (released before the date was set or changed: ``make release`` makes them say it)."""
    assignment = release.coursedir.assignment_id
    term = Term(parent=release)
    due = term.due_date(assignment)
    if due is None:
        return
    for path in sorted(Path(release.src_path).glob("*.ipynb")):
        stated = stated_due(path)
        if stated != due.isoformat():
            said = f"states the due date {when_words(datetime.fromisoformat(stated))}" if stated else \
                "states no due date"
            release.log.warning("%s %s, but c.Term.due says %s: run `make release` (nbgrader generate_assignment "
                                "%s --force), then release again, so that the students' notebooks say it",
                                path, said, term.due_words(assignment), assignment)
    with Gradebook(release.coursedir.db_url, release.coursedir.course_id) as gb:
        try:
            gb.find_assignment(assignment).duedate = due
        except MissingEntry:  # never generated in this gradebook: generate_assignment or autograde puts it in
            return
        gb.db.commit()


def deadline_sentences(term: Term, submission) -> list[str]:
    """What a student's feedback page says of the deadline of a gradebook submission (nbgrader's
    ``SubmittedAssignment``): the due date and, with an extension, her own deadline; nothing without a due date."""
    assignment, student = submission.assignment.name, submission.student.id
    due = term.due_words(assignment, submission.assignment.duedate)
    if not due:
        return []
    said = [f"Due {due}."]
    extension = term.extension(student, assignment)
    if extension:
        said.append(f"Your deadline, with your extension of {span_words(extension)}: "
                    f"{term.due_words(assignment, submission.assignment.duedate, extension)}.")
    return said


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
    """``seconds`` late in words ("" when on time): seconds, minutes, hours, or days from two days up, each unit
    taken only while the number it rounds to stays below the next unit (never "0 minutes late", "60 minutes late" or
    "48.0 hours late")."""
    if seconds <= 0:
        return ""
    if round(seconds) < 60:
        return "1 second late" if round(seconds) <= 1 else f"{round(seconds)} seconds late"
    minutes = round(seconds / 60)
    if minutes < 60:
        return "1 minute late" if minutes == 1 else f"{minutes} minutes late"
    hours = seconds / 3600
    return f"{hours:.1f} hours late" if float(f"{hours:.1f}") < 48 else f"{hours / 24:.1f} days late"


def standing(submission, term: Term) -> Standing:
    """The standing of a gradebook submission (an nbgrader ``SubmittedAssignment``)."""
    pending = sum(1 for nb in submission.notebooks for g in nb.grades if g.needs_manual_grade)
    late = term.seconds_late(submission)
    return Standing(score=round(submission.score, 2), penalty=term.penalty(submission.score, late),
                    seconds_late=late, pending=pending)


def course_term(course: Path) -> Term:
    """The course's :class:`Term`, as its ``nbgrader_config.py`` sets it."""
    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    except Exception:  # the course's configuration has been loaded by nbgrader already where it matters
        config = None
    term = Term(config=config) if config is not None else Term()
    if not Path(term.extensions).is_absolute():
        term.extensions = str(Path(course) / term.extensions)
    return term
