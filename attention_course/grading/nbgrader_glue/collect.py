"""The course's collect: nbgrader's ``ExchangeCollect`` as the course runs it (installed by :mod:`.patches`).

Which folders of ``inbound/`` may be taken is :func:`.trust.inbound_entries`'s call (a look, by path). Of each
student's, the one nbgrader would take (the newest; with ``--before-duedate`` the newest before the due date) is then
copied once, through file descriptors, into a staging folder of the course (:func:`.trust.take_inbound`): what was
checked is what was copied, and the copy is dated by the latest change of anything in it. Only then does it replace
``submitted/<student>/<assignment>``, with ``timestamp.txt`` written from that time. A folder refused while it is
copied (a link, another user's file, a change while it was read) is reported and recorded, and the student's next
folder is tried; nothing one folder does stops the collect of the others.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.utils import capture_log, parse_utc, temp_attrs

from .. import trust

#: The course's staging folder for collect: the grader's alone (0700), emptied after every collect.
STAGING = ".collect-staging"


def nbgrader_rules(coursedir, log=None):
    """nbgrader's ``CourseDirectory.ignore``, ``include`` and ``max_file_size`` as an ``ignore(rel, st)`` for
    :func:`.trust.safe_copy`, decided from each entry's own ``lstat`` (nbgrader's version stats by path, through
    links)."""
    exclude, include = coursedir.ignore, coursedir.include
    limit = 1000 * coursedir.max_file_size if coursedir.max_file_size else None

    def ignored(rel: str, st: os.stat_result) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if exclude and any(fnmatch.fnmatch(name, glob) for glob in exclude):
            return True
        if stat.S_ISREG(st.st_mode):
            if include and not any(fnmatch.fnmatch(name, glob) for glob in include):
                return True
            if limit and st.st_size > limit:
                if log is not None:
                    log.warning("Ignoring file too large '%s' (see config option CourseDirectory.max_file_size)",
                                trust.display_name(rel))
                return True
        return False

    return ignored


def share_with_group(dest: str, log) -> None:
    """nbgrader's ``groupshared``: folders 2770 and files 660 at least, where this user may change them."""
    for dirname, _, filenames in os.walk(dest):
        for path, bits in [(dirname, 0o2770)] + [(os.path.join(dirname, f), 0o660) for f in filenames]:
            mode = os.stat(path).st_mode
            if mode & bits != bits:
                try:
                    os.chmod(path, (mode | bits) & (0o2777 if bits == 0o2770 else 0o777))
                except PermissionError:
                    log.warning("Could not update permissions of %s to make it groupshared", path)


def preferred(entries: list, duedate, before_duedate: bool) -> list:
    """A student's folders in the order collect tries them: newest first; with ``before_duedate`` and a due date,
    those seen before it first (nbgrader's choice, with the next one to try when one is refused)."""
    newest = sorted(entries, key=lambda e: (e.seen, e.name), reverse=True)
    if duedate is None or not before_duedate:
        return newest
    due = duedate.replace(tzinfo=timezone.utc) if duedate.tzinfo is None else duedate
    return [e for e in newest if e.seen <= due] + [e for e in newest if e.seen > due]


def copy_files(self) -> None:
    """``ExchangeCollect.copy_files``: each student's folder taken once from a snapshot (see the module). Records
    ``self.outcomes``: folder name -> (what became of it, why), for the grading service."""
    course = Path(self.coursedir.root)
    candidates: dict = getattr(self, "candidates", {})
    self.outcomes = {}
    if not candidates:
        self.log.warning("No submissions of '%s' for course '%s' to collect", self.coursedir.assignment_id,
                         self.coursedir.course_id)
        return
    self.log.info("Processing %d submissions of '%s' for course '%s'", len(candidates), self.coursedir.assignment_id,
                  self.coursedir.course_id)
    staging = course / STAGING
    staging.mkdir(mode=0o700, exist_ok=True)
    os.chmod(staging, 0o700)
    run = Path(tempfile.mkdtemp(prefix="collect-", dir=staging))  # this collect's own: another may run beside it
    inbound = Path(self.inbound_path)
    self.secrets = _secrets(self, inbound, candidates)
    try:
        for student, entries in sorted(candidates.items()):
            dest = Path(self.coursedir.format_path(self.coursedir.submitted_directory, student,
                                                   self.coursedir.assignment_id))
            for entry in entries:
                stage = Path(tempfile.mkdtemp(prefix="take-", dir=run))
                try:
                    outcome = _take(self, inbound, entry, stage, dest, parse_utc)
                except Exception as exc:  # the grader's own failure (a full disk): not the student's, said
                    outcome = ("error", f"could not be collected ({type(exc).__name__}: {exc})")
                    self.log.error("%s: %s", trust.display_name(entry.name), outcome[1])
                finally:
                    shutil.rmtree(stage, ignore_errors=True)
                self.outcomes[entry.name] = outcome
                if outcome[0] != "refused":
                    break
                self.log.warning("Refused %s: %s", trust.display_name(entry.name), outcome[1])
                trust.record_refusals(course, self.coursedir.assignment_id,
                                      [{"entry": entry.name, "student": student, "owner": "", "why": outcome[1]}])
    finally:
        shutil.rmtree(run, ignore_errors=True)
        try:
            staging.rmdir()  # unless another collect is using it
        except OSError:
            pass


def _secrets(self, inbound: Path, candidates: dict) -> dict[str, str]:
    """:func:`.trust.secret_owners` of the hand-ins in ``submitted/`` and the folders this collect may take."""
    pattern = self.coursedir.format_path(self.coursedir.submitted_directory, "*", self.coursedir.assignment_id)
    held = [(Path(p).parent.name, trust.exchange_metadata(Path(p)).get("submission_secret.txt"))
            for p in sorted(glob.glob(pattern))]
    new = [(student, trust.inbound_view(inbound, entry.name, entry.uid)[0], entry.seen.timestamp())
           for student, entries in candidates.items() for entry in entries]
    return trust.secret_owners(held, new)


def _take(self, inbound: Path, entry, stage: Path, dest: Path, parse_utc) -> tuple[str, str]:
    snap = trust.take_inbound(inbound, entry, stage / "handin", nbgrader_rules(self.coursedir, self.log))
    if snap.whole:
        return "refused", snap.whole
    for problem in snap.problems():
        self.log.warning("%s: not collected: %s", trust.display_name(entry.name), problem)
    when = datetime.fromtimestamp(snap.changed, timezone.utc)
    stamp = trust.trusted_timestamp(when)
    secret = trust.exchange_metadata(stage / "handin").get("submission_secret.txt", "")
    if self.secrets.get(secret, entry.student) != entry.student:  # its pages would be named as a classmate's
        return "refused", ("holds another student's submission_secret.txt: its feedback would replace theirs (ask "
                           "both students how the secret came to be shared)")
    if dest.is_dir():
        existing = self.coursedir.get_existing_timestamp(str(dest))
        new = parse_utc(stamp)
        if existing == new and trust.exchange_metadata(dest).get("submission_secret.txt") == secret:
            return "collected", stamp  # this very hand-in, collected before (the service grading it again)
        if not ((self.update and (existing is None or new > existing))
                or (self.before_duedate and existing != new)):
            self.log.info("No newer submission to collect: %s %s" if self.update else
                          "Submission already exists, use --update to update: %s %s", entry.student,
                          self.coursedir.assignment_id)
            return "kept", "submitted/ holds this hand-in or a newer one"
        self.log.info("Updating submission: %s %s", entry.student, self.coursedir.assignment_id)
    else:
        self.log.info("Collecting submission: %s %s", entry.student, self.coursedir.assignment_id)
    taken = stage / "handin"
    (taken / "timestamp.txt").unlink(missing_ok=True)  # the student's own says nothing the grader trusts
    (taken / "timestamp.txt").write_text(stamp, encoding="utf-8")
    if self.coursedir.groupshared:
        share_with_group(str(taken), self.log)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        os.rename(dest, stage / "replaced")
    try:
        os.rename(taken, dest)
    except OSError:  # submitted/ on another file system than the course folder
        shutil.copytree(taken, dest, symlinks=True)
    self.secrets[secret] = entry.student
    return "collected", stamp


def collect_one(api, assignment: str, student: str, entry: str, shared: bool) -> str:
    """Collect the folder ``entry`` of ``inbound/`` alone into ``submitted/`` (the grading service: one hand-in at a
    time), with nbgrader's collect as the course runs it; "" when ``submitted/`` now holds it, else why not
    (``newer: ...`` when it holds a later hand-in of this student, ``refused: ...`` when the copy was refused,
    ``error: ...`` when the grader failed to copy it)."""
    with temp_attrs(api.coursedir, assignment_id=assignment, student_id=student):
        app = api.exchange.Collect(coursedir=api.coursedir, authenticator=api.authenticator, parent=api)
        app.update = True
        app.check_owner = shared  # one user's own exchange: every folder is that user's
        app.only_entries = {entry}
        result = capture_log(app)
    if not result.get("success"):
        return "collect failed: " + (result.get("error") or result.get("log") or "")[-500:]
    state, why = getattr(app, "outcomes", {}).get(entry, ("", ""))
    if state == "collected":
        return ""
    if state == "kept":
        return "newer: submitted/ holds a later hand-in of this student"
    if state == "refused":
        return f"refused: {why}"
    if state == "error":
        return f"error: {why}"
    return "it is no longer in the exchange, or collect refused it (see collect-refused.jsonl)"


def handed_in(course: Path, student: str, assignment: str) -> float | None:
    """When the hand-in now in ``submitted/`` came, as collect dated its copy (None: unknown)."""
    text = trust.read_small(Path(course) / "submitted" / student / assignment / "timestamp.txt")
    try:
        return parse_utc(text.strip()).replace(tzinfo=timezone.utc).timestamp() if text else None
    except ValueError:
        return None
