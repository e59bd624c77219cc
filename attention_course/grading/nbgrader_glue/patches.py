"""Where the course changes nbgrader's own code, all in one place, for nbgrader 0.9.6 only.

:func:`install` (run when ``nbgrader_config.py`` imports the course) first checks the version: under any
other nbgrader it stops with a message naming what it would patch, because each patch replaces code of
0.9.6 that a later release may have changed. The patches:

``Autograde.init_assignment``
    Reads the hand-in through :func:`.trust.inspect_handin`: a notebook that is a link, a pipe, a device, a
    hard link to a file outside the hand-in or too large is refused (scored 0, as a missing notebook, and
    logged), and nothing of the hand-in is copied into ``autograded/`` (stock nbgrader copies every other
    file of the hand-in, following links, and the Formgrader then serves them from the server's origin).
``BaseConverter.init_assignment`` (for ``GenerateFeedback``)
    Copies nothing: ``feedback/`` holds the feedback pages only.
``CourseDirectory.get_existing_timestamp``
    Reads ``timestamp.txt`` only when it is a small regular file (:func:`.trust.read_small`).
``Exchange.do_copy``
    Copies with :func:`.trust.safe_copy`: through file descriptors, never through a link (submit, release, fetch);
    nbgrader's ignore, include and size rules decided from each entry's own ``lstat``.
``ExchangeCollect.init_src`` / ``copy_files``
    Takes an inbound folder only as :func:`.trust.inbound_entries` allows (on a shared exchange, owned by the
    Unix user of the student id it claims; never dated in the future), once, through file descriptors
    (:func:`.collect.copy_files`, :func:`.trust.take_inbound`), at the latest change of anything in that copy, which
    it writes into ``submitted/``'s ``timestamp.txt``; refusals are logged and recorded, and stop nobody else's.
``ExchangeReleaseAssignment.ensure_root`` / ``init_dest``
    Make the exchange and ``inbound/`` sticky (as ``/tmp``; stock nbgrader makes the exchange 0777): a student
    cannot rename the course folder away, nor rename or remove a classmate's hand-in.
``ExchangeReleaseAssignment.copy_files``
    Then puts the due date of ``c.Term.due`` into the gradebook and warns about a notebook of ``release/`` that states
    another (:func:`.term.due_date_at_exchange_release`).
``ExchangeSubmit.copy_files``
    Leaves the hand-in's folder 0755 (stock: 0777), so that nobody who learns its name adds or removes its files.
``ExchangeReleaseFeedback.copy_files``
    Skips, with a warning, the page of a hand-in copied in by hand (no ``submission_secret.txt``), instead of
    stopping the whole release.
``Grade.manual_score`` / ``Grade.extra_credit``
    Kept within what the cell allows (:func:`.trust.capped_grade`) whoever sets them: the Formgrader's API,
    a script, or a page that was made to call that API. A manual score also records the text of the answer it was
    given to (:func:`.handgrades.remember_manual_score`), so that a regrade keeps it while that text is unchanged.
``SubmissionHandler`` (Formgrader's submission page)
    Sent with a Content-Security-Policy whose scripts must carry a per-page nonce: the page's own do, and
    nothing rendered from a hand-in can (a second line of defence behind :func:`.trust.clean_html`).
``api.create_engine``, ``api.get_alembic_version``, ``common.jsonschema``, ``SaveAutoGrades.preprocess``
    What nbgrader does again and again for the same answer, or commits a row at a time: :mod:`.speedups`.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
from pathlib import Path

import nbgrader
from nbgrader import utils
from nbgrader.api import Grade, Gradebook, MissingEntry
from nbgrader.converters.autograde import Autograde
from nbgrader.converters.base import BaseConverter, NbGraderException
from nbgrader.converters.generate_feedback import GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default.collect import ExchangeCollect, groupby
from nbgrader.exchange.default.exchange import Exchange
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import check_mode, notebook_hash, parse_utc
from sqlalchemy import event

from .. import trust
from ..errors import EnvironmentMismatch
from . import collect, formgrader, handgrades, speedups, term
from .regrade import mark_released

PINNED = "0.9.6"
PATCHED = ["Autograde.init_assignment", "BaseConverter.init_assignment", "CourseDirectory.get_existing_timestamp",
           "Exchange.do_copy", "ExchangeCollect.init_src/copy_files",
           "ExchangeReleaseAssignment.ensure_root/init_dest/copy_files", "ExchangeSubmit.copy_files",
           "ExchangeReleaseFeedback.copy_files", "Grade.manual_score/extra_credit", "formgrader SubmissionHandler",
           "FormgradeExtension.init_handlers", *speedups.PATCHED]
_installed = False


def check_version(version: str = nbgrader.__version__) -> None:
    """Stop with a clear message unless nbgrader is the version these patches were written for."""
    if version != PINNED:
        raise EnvironmentMismatch(
            f"attention_course needs nbgrader {PINNED}, found {version}: the course patches nbgrader's "
            f"{', '.join(PATCHED)} (attention_course/grading/nbgrader_glue/patches.py). Install the pinned version "
            f"(make install) or port the patches and update PINNED.")


def install() -> None:
    """Check the version and apply every patch (once per process)."""
    global _installed
    if _installed:
        return
    check_version()
    speedups.install()
    _converters()
    _exchange()
    _gradebook()
    formgrader.install()
    _installed = True


# -- hand-ins: read as data, nothing copied ----------------------------------------------------
def _converters() -> None:
    stock_init = BaseConverter.init_assignment

    def init_assignment(self, assignment_id, student_id):
        if isinstance(self, GenerateFeedback):  # feedback/ holds the pages and the exchange's validated metadata
            trust.write_exchange_metadata(Path(self._format_dest(assignment_id, student_id)),
                                          trust.exchange_metadata(Path(self._format_source(assignment_id, student_id))))
            return
        stock_init(self, assignment_id, student_id)

    def get_existing_timestamp(self, dest_path):
        text = trust.read_small(Path(dest_path) / "timestamp.txt")
        if text is None or not text.strip():
            return None

        try:
            return parse_utc(text.strip())
        except ValueError:
            self.log.warning("Invalid timestamp in %s: ignored", os.path.join(dest_path, "timestamp.txt"))
            return None

    BaseConverter.init_assignment = init_assignment
    CourseDirectory.get_existing_timestamp = get_existing_timestamp
    Autograde.init_assignment = _autograde_init_assignment


def _autograde_init_assignment(self, assignment_id: str, student_id: str) -> None:
    """nbgrader 0.9.6's ``Autograde.init_assignment`` with the hand-in read as data (see the module)."""
    src = Path(self._format_source(assignment_id, student_id))
    handin = trust.inspect_handin(src, within=src.parent.parent)
    for rel, why in handin.refused:
        self.log.warning("%s/%s: %s refused: %s", student_id, assignment_id, trust.display_name(rel), why)
    with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
        if self.create_student:
            gb.update_or_create_student(student_id)
        else:
            try:
                gb.find_student(student_id)
            except MissingEntry:
                msg = "No student with ID '%s' exists in the database" % student_id
                self.log.error(msg)
                raise NbGraderException(msg)
        try:
            gb.find_assignment(assignment_id)
        except MissingEntry:
            msg = "No assignment with ID '%s' exists in the database" % assignment_id
            self.log.error(msg)
            raise NbGraderException(msg)
        timestamp = self.coursedir.get_existing_timestamp(str(src)) if handin.readable("timestamp.txt") else None
        metadata = trust.exchange_metadata(src) if handin.readable("timestamp.txt") \
            or handin.readable("submission_secret.txt") else {}
        if timestamp is None:  # copied in by hand (an LMS export): the notebooks' time, said so
            timestamp, metadata["timestamp.txt"] = trust.handed_in_time(handin)
            if timestamp is not None:  # one line for the whole run in `make autograde` (autograde.run)
                self.log.info("%s/%s has no timestamp.txt: taken as handed in at %s, its notebooks' modification "
                                 "time (write submitted/%s/%s/timestamp.txt to give another)", student_id,
                                 assignment_id, metadata["timestamp.txt"], student_id, assignment_id)
        if timestamp:
            submission = gb.update_or_create_submission(assignment_id, student_id, timestamp=timestamp)
            if submission.total_seconds_late > 0:
                self.log.warning("%s is %s seconds late", submission, submission.total_seconds_late)
        else:
            gb.update_or_create_submission(assignment_id, student_id)

    # the exchange's metadata, validated and re-written; the master's extra files (the instructor's own)
    dest_path = self._format_dest(assignment_id, student_id)
    trust.write_exchange_metadata(Path(dest_path), {k: v for k, v in metadata.items() if v})
    source_path = self.coursedir.format_path(self.coursedir.source_directory, ".", assignment_id)
    excluded = {os.path.join(source_path, x) for x in self.exclude_overwriting.get(assignment_id, [])}
    for filename in set(utils.find_all_files(source_path, self.coursedir.ignore + ["*.ipynb"])) - excluded:
        dest = os.path.join(dest_path, os.path.relpath(filename, source_path))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.lexists(dest):
            os.remove(dest)
        shutil.copy(filename, dest)

    known, refused = [], []
    with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
        for notebook in self.notebooks:
            notebook_id = os.path.splitext(os.path.basename(notebook))[0]
            try:
                gb.find_notebook(notebook_id, assignment_id)
            except MissingEntry:
                self.log.warning("Skipping unknown notebook: %s", notebook)
                continue
            (known if handin.readable(os.path.relpath(notebook, src)) else refused).append(notebook)
        if not known and not refused:
            msg = "No notebooks found, did you forget to run 'nbgrader generate_assignment'?"
            self.log.error(msg)
            raise NbGraderException(msg)
        self.notebooks = known
        # a notebook not handed in, or refused, scores 0 (stock nbgrader does this for missing ones)
        for notebook in gb.find_assignment(assignment_id).notebooks:
            if not handin.readable(f"{notebook.name}.ipynb"):
                submission = gb.find_submission_notebook(notebook.name, assignment_id, student_id)
                for grade in submission.grades:
                    grade.auto_score = 0
                    grade.needs_manual_grade = False
                gb.db.commit()


def _exchange() -> None:
    def do_copy(self, src, dest, log=None):
        limit = 1000 * self.coursedir.max_dir_size
        snap = trust.safe_copy(Path(src), Path(dest), log=self.log,
                               ignore=collect.nbgrader_rules(self.coursedir, self.log), max_total=limit)
        if snap.too_big:
            self.log.error("Directory size is too big")
            raise RuntimeError(f"Directory size is too big: its files pass the maximum size, {limit} bytes")
        if self.coursedir.groupshared:
            collect.share_with_group(str(dest), self.log)

    Exchange.do_copy = do_copy
    _collect()


def _collect() -> None:
    """``ExchangeCollect``: which inbound folders may be taken and when they came is :func:`.trust.inbound_entries`'s
    call, never the folder's name or its ``timestamp.txt``; each is then taken once through file descriptors and
    dated by that copy (:func:`.collect.copy_files`). Owners are checked on a shared exchange (not the course's own
    ``exchange/`` folder, where every hand-in is the one user's) unless ``check_owner`` is off."""
    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail(f"You don't have read permissions for the directory: {self.inbound_path}")
        course = Path(self.coursedir.root)
        pattern = "{}+{}+*".format(self.coursedir.student_id or "*", self.coursedir.assignment_id)
        names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(self.inbound_path), pattern)))
        only = getattr(self, "only_entries", None)  # the grading service collects one hand-in at a time
        if only is not None:
            names = [name for name in names if name in only]
        shared = Path(self.root).resolve() != (course / "exchange").resolve()
        taken, refused = trust.inbound_entries(Path(self.inbound_path), names, trust.logins_table(course),
                                               check_owner=shared and self.check_owner,
                                               ignore=collect.nbgrader_rules(self.coursedir))
        for entry in refused:
            self.log.warning("Refused %s: %s", trust.display_name(entry["entry"]), entry["why"])
        redated = [{"entry": e.name, "student": e.student, "owner": "", "why": e.note, "taken": True}
                   for e in taken if e.note]  # a backdated folder shows up, collected or not
        for entry in redated:
            self.log.warning("Re-dated %s: %s", trust.display_name(entry["entry"]), entry["why"])
        trust.record_refusals(course, self.coursedir.assignment_id, refused + redated)
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        self.candidates = {student: collect.preferred(entries, self.duedate, self.before_duedate)
                           for student, entries in groupby(taken, lambda e: e.student).items()}
        self.src_records = [{"username": student, "filename": entries[0].name, "timestamp": entries[0].seen}
                            for student, entries in self.candidates.items()]

    ExchangeCollect.init_src = init_src
    ExchangeCollect.copy_files = collect.copy_files

    release_init_dest = ExchangeReleaseAssignment.init_dest

    release_ensure_root = ExchangeReleaseAssignment.ensure_root

    def sticky(folder: Path) -> None:
        if folder.stat().st_uid == os.geteuid():
            folder.chmod(folder.stat().st_mode & 0o7777 | stat.S_ISVTX)

    def ensure_root(self):  # the exchange sticky, as /tmp: nobody renames the instructor's course folder away
        release_ensure_root(self)
        sticky(Path(self.root))

    def init_dest(self):  # inbound/ sticky: a student cannot rename or remove a classmate's hand-in
        release_init_dest(self)
        sticky(Path(self.inbound_path))

    release_copy_files = ExchangeReleaseAssignment.copy_files

    def release_copy(self):  # then the term's due date into the gradebook; a release/ stating another is said
        release_copy_files(self)
        term.due_date_at_exchange_release(self)

    ExchangeReleaseAssignment.ensure_root = ensure_root
    ExchangeReleaseAssignment.init_dest = init_dest
    ExchangeReleaseAssignment.copy_files = release_copy

    submit_copy_files = ExchangeSubmit.copy_files

    def copy_files(self):  # the hand-in's folder 0755, not stock 0777: nobody else adds or removes its files
        submit_copy_files(self)
        entry = Path(self.inbound_path) / self.assignment_filename
        if entry.is_dir() and not entry.is_symlink() and entry.stat().st_uid == os.geteuid():
            entry.chmod(0o755)

    ExchangeSubmit.copy_files = copy_files

    ExchangeReleaseFeedback.copy_files = _release_feedback_copy_files


def _release_feedback_copy_files(self) -> None:
    """nbgrader 0.9.6's ``ExchangeReleaseFeedback.copy_files``, except that a page whose hand-in came without the
    exchange's metadata (copied into ``submitted/`` by hand: no ``submission_secret.txt``, which names the page for
    its student) is skipped with a warning saying where it is, instead of stopping the whole release with
    ``FileNotFoundError``; the metadata is read as data (:func:`.trust.exchange_metadata`)."""
    excluded = set(self.coursedir.student_id_exclude.split(",")) if self.coursedir.student_id_exclude else set()
    pattern = re.escape(os.path.sep).join([
        self.coursedir.format_path(self.coursedir.feedback_directory, "(?P<student_id>.*)",
                                   self.coursedir.assignment_id, escape=True), "(?P<notebook_id>.*).html"])
    skipped, released = set(), set()
    for page in sorted(glob.glob(os.path.join(self.src_path, "*.html"))):
        match = re.match(pattern, page)
        if match is None:
            self.log.error("Could not match '%s' with regexp '%s'", page, pattern)
            continue
        student_id, notebook_id = match.group("student_id"), match.group("notebook_id")
        if student_id in excluded:
            continue
        metadata = trust.exchange_metadata(Path(page).parent)
        if "submission_secret.txt" not in metadata:
            if student_id not in skipped:
                self.log.warning("Not released: %s's feedback on %s (%s): the hand-in did not come through the "
                                 "exchange (no submission_secret.txt), so the student cannot fetch it; send the page "
                                 "yourself", student_id, self.coursedir.assignment_id, Path(page).parent)
                skipped.add(student_id)
            continue
        checksum = notebook_hash(secret=metadata["submission_secret.txt"], notebook_id=notebook_id)
        self.log.info("Releasing feedback for student '%s' on assignment '%s/%s/%s' (%s)", student_id,
                      self.coursedir.course_id, self.coursedir.assignment_id, notebook_id,
                      metadata.get("timestamp.txt", "no time"))
        temporary = os.path.join(self.dest_path, f"{checksum}-tmp.html")
        shutil.copy(page, temporary)
        shutil.move(temporary, os.path.join(self.dest_path, f"{checksum}.html"))  # atomically, as stock
        released.add(student_id)
    if released:  # a later hand-in's page, after a regrade, reaches these students too (regrade.reach)

        mark_released(self.coursedir.db_url, self.coursedir.course_id, self.coursedir.assignment_id, released)


# -- the gradebook: scores within what a cell allows ------------------------------------------------
def _gradebook() -> None:
    def manual(target, value, oldvalue, initiator):
        return trust.capped_grade(value, None, target.max_score)[0]

    def extra(target, value, oldvalue, initiator):
        return trust.capped_grade(None, value, target.max_score)[1]

    event.listen(Grade.manual_score, "set", manual, retval=True)
    event.listen(Grade.extra_credit, "set", extra, retval=True)
    handgrades.install_events()
