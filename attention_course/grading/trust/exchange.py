"""The exchange's inbound folder: which hand-ins collect may take, whose they are and when they came.

A folder in ``inbound/`` is named ``<student>+<assignment>+<time>+<random>`` by whoever wrote it, and its
``timestamp.txt`` is the student's too: neither may say who handed in or when. The owner of the folder (its
inode, which only root can change) says who. When: the latest inode change time of anything in it (its folders and
files), which its owner can move forward (by changing anything) but never back. The student can change the folder
while the grader reads it, so a hand-in is taken once, through file descriptors (:func:`take_inbound`, on
:func:`.snapshot.take`), and only that copy is graded and dated.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from pwd import getpwnam, getpwuid

from .files import EXCHANGE_FILES, exchange_metadata
from .snapshot import read_view, take

#: Where collect records what it refused, one JSON object a line, beside the gradebook (the grade table reads it).
REFUSALS = "collect-refused.jsonl"
#: How far ahead of the collecting machine's clock a folder's name may be dated (clocks of a hub's machines drift).
FUTURE_SLACK_S = 300
#: What nbgrader writes in timestamp.txt (its ``timestamp_format``).
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"


@dataclass
class Inbound:
    """One folder of ``inbound/`` collect may take: whose it is and when it came (as the grader can trust)."""

    name: str
    student: str
    seen: datetime  # the latest inode change time of anything in it when it was listed, UTC
    note: str = ""  # its name claims another time than when it came (more than FUTURE_SLACK_S off): said, not used
    uid: int | None = None  # the Unix user it must belong to (None: owners not checked)


def login_of(student: str, logins: dict) -> str:
    """The Unix login of a student id: the course's table where ids and logins differ, else the id itself."""
    return logins.get(student, student)


#: The course's table of student ids whose Unix login differs: ``student_id,login`` lines, beside the gradebook.
LOGINS = "student_logins.csv"


def logins_table(course: Path) -> dict[str, str]:
    """Student id -> Unix login, from the course's :data:`LOGINS` file (none: every id is its login)."""
    try:
        with open(course / LOGINS, newline="", encoding="utf-8") as f:
            return {row[0].strip(): row[1].strip() for row in csv.reader(f)
                    if len(row) >= 2 and row[0].strip() and row[0].strip() != "student_id"}
    except OSError:
        return {}


def inbound_entries(inbound: Path, names: list[str], logins: dict, check_owner: bool = True,
                    now: float | None = None, ignore=None) -> tuple[list[Inbound], list[dict]]:
    """Which of the folders ``names`` of ``inbound`` collect may take, and each refused one with why.

    Taken: a real folder (not a link) whose owner is the Unix user of the student id its name claims
    (:func:`login_of`; not checked where ``check_owner`` is off: an exchange only one user writes), not dated in
    the future, holding what :func:`_contents_problem` allows. Its time is the latest inode change time of anything
    in it, never its name or its ``timestamp.txt``; a name that claims another time gets a note
    (:attr:`Inbound.note`). A refused folder is never collected, so it replaces nobody's hand-in. This is a look,
    through file descriptors, reading no file (``ignore(rel, st)``: what the copy will leave out): what is collected,
    and its time, is what :func:`take_inbound` then reads."""
    now = time.time() if now is None else now
    taken, refused = [], []
    for name in names:
        parts = name.split("+")
        student = "+".join(parts[:-3]) if len(parts) >= 4 else parts[0]
        why, owner, claimed = "", "", _claimed(parts)
        try:
            name.encode("utf-8")
            info = os.lstat(inbound / name)
        except UnicodeEncodeError:
            why = "its name is not valid UTF-8"
        except OSError as exc:
            why = f"unreadable ({exc.strerror})"
        if not why:
            try:
                owner = getpwuid(info.st_uid).pw_name
            except KeyError:
                owner = f"uid {info.st_uid}"
            login = login_of(student, logins)
            try:
                expected = getpwnam(login).pw_uid
            except (KeyError, ValueError):
                expected = None
            if not stat.S_ISDIR(info.st_mode):
                why = "not a folder (a link or a file)"
            elif check_owner and expected is None:
                why = f"claims to be by {student}, but there is no Unix user {login}"
            elif check_owner and info.st_uid != expected:
                why = f"claims to be by {student} ({login}) but is owned by {owner}"
            elif claimed is not None and claimed > now + FUTURE_SLACK_S:
                why = f"dated in the future ({datetime.fromtimestamp(claimed, timezone.utc):%Y-%m-%d %H:%M} UTC)"
            else:
                try:
                    why, latest = _contents_problem(inbound, name, info.st_uid if check_owner else None, ignore)
                except (OSError, ValueError) as exc:  # whatever one folder does, the others are looked at
                    why = f"could not be read ({type(exc).__name__})"
        if why:
            refused.append({"entry": name, "student": student, "owner": owner, "why": why})
        else:
            latest = max(latest, info.st_ctime)
            seen = datetime.fromtimestamp(latest, timezone.utc)
            taken.append(Inbound(name, student, seen, redated_note(claimed, latest),
                                 info.st_uid if check_owner else None))
    return taken, refused


def secret_owners(held: list, new: list) -> dict[str, str]:
    """Rule: a submission secret is one student's (feedback is released under a name made from it, so a hand-in
    under a classmate's secret would have its pages replace theirs). ``held``: (student, secret) of the hand-ins in
    ``submitted/``, whose students keep theirs; ``new``: (student, secret, time it came) of folders of ``inbound/``.
    A secret only new folders have is the student's whose folder came first (a copy of a secret is made after the
    folder it was read from, and no inode time can be set back); of two that came at the same time, nobody's.
    Returns secret -> student ("" for nobody)."""
    owners: dict[str, str] = {}
    for student, secret in held:
        if secret:
            owners.setdefault(secret, student)
    first: dict[str, dict] = {}
    for student, secret, came in new:
        if secret and secret not in owners:
            times = first.setdefault(secret, {})
            times[student] = min(times.get(student, came), came)
    for secret, times in first.items():
        earliest = min(times.values())
        students = [s for s, t in times.items() if t == earliest]
        owners[secret] = students[0] if len(students) == 1 else ""
    return owners


def redated_note(claimed: float | None, when: float) -> str:
    """The note on a folder whose name claims another time than when it came ("" when it agrees)."""
    if claimed is None or abs(claimed - when) <= FUTURE_SLACK_S:
        return ""
    return (f"its name says {datetime.fromtimestamp(claimed, timezone.utc):%Y-%m-%d %H:%M} UTC; taken as handed in "
            f"when it came, {datetime.fromtimestamp(when, timezone.utc):%Y-%m-%d %H:%M} UTC")


def take_inbound(inbound: Path, entry: Inbound, dest: Path, ignore=None):
    """Rule: a hand-in is taken once, from a snapshot the student cannot touch. Copies the folder ``entry`` of
    ``inbound`` into ``dest`` through file descriptors (:func:`.snapshot.take`, strict): the folder and everything
    in it its owner's (where owners are checked), files and folders only, nothing changed while it was read, and
    nbgrader's ``submission_secret.txt`` in it as a regular file of the expected form. Returns the
    :class:`.snapshot.Snapshot`; its ``whole`` says why nothing was taken. The hand-in's time is its ``changed``: the
    latest inode change time of anything in the copy (a folder refused and mended later counts from the mending).
    ``ignore(rel, st)``: what nbgrader's own rules leave out (:func:`.collect.nbgrader_rules`)."""
    snap = take(inbound, entry.name, dest, owner=entry.uid, strict=True, ignore=ignore)
    if not snap.whole and "submission_secret.txt" not in exchange_metadata(dest):
        snap.whole = ("not made by nbgrader's submit: it has no submission_secret.txt (its feedback could not be "
                      "returned)")
        snap.files = []

        shutil.rmtree(dest, ignore_errors=True)
    return snap


def inbound_view(inbound: Path, name: str, owner: int | None = None, wanted=()) -> tuple[str | None, list[str], float]:
    """What the grader reads of a folder of ``inbound/`` without taking it: nbgrader's ``submission_secret.txt`` (of
    its expected form), which of the file names ``wanted`` it holds, and its inode change time, through file
    descriptors (the folder opened with ``O_NOFOLLOW``, owned by ``owner`` where given; the secret a small regular
    file opened from it). (None, [], 0.0) where it cannot be read so; a secret not as it should be is None."""
    found = read_view(inbound, name, owner, "submission_secret.txt", wanted)
    if found is None:
        return None, [], 0.0
    text, present, ctime = found
    secret = text.strip() if text is not None and EXCHANGE_FILES["submission_secret.txt"].fullmatch(text.strip()) \
        else None
    return secret, present, ctime


def _contents_problem(inbound: Path, name: str, owner: int | None, ignore=None) -> tuple[str, float]:
    """Why collect may not take what the folder ``name`` of ``inbound`` holds ("" when it may): only files and
    folders (a link, a pipe or a device leaves nothing in ``submitted/``: the whole folder is refused and the refusal
    reported); on a shared exchange, all its owner's (stock nbgrader leaves a hand-in's folder 0777: whoever learns
    its name could add files to it); and nbgrader's ``submission_secret.txt``, which its submit always writes
    (feedback is returned under a name made from it; a folder made by hand without one would stop the release of
    everyone's feedback). Also returns the latest inode change time of what it holds. A look through file
    descriptors that reads no file (:func:`.snapshot.take` with ``read=False``): what it says is of the folder it
    opened, never of a link swapped in; what is taken is read again by :func:`take_inbound`."""
    snap = take(inbound, name, None, owner=owner, strict=True, ignore=ignore, read=False)
    if snap.whole:
        return snap.whole, 0.0
    if not snap.has("submission_secret.txt"):
        return ("not made by nbgrader's submit: it has no submission_secret.txt (its feedback could not be returned)",
                snap.changed)
    return "", snap.changed


def _claimed(parts: list[str]) -> float | None:
    """The time a folder's name claims, in seconds, or None where it cannot be read."""
    from nbgrader.utils import parse_utc  # here: the judge's process, forked from the fork server, imports trust

    try:
        return parse_utc(parts[-2] if len(parts) >= 4 else parts[2]).replace(tzinfo=timezone.utc).timestamp()
    except (ValueError, IndexError, OverflowError, TypeError):
        return None


def trusted_timestamp(when: datetime) -> str:
    """``timestamp.txt`` as the grader writes it in ``submitted/``: the time collect trusts."""
    return when.strftime(TIMESTAMP_FORMAT)


def handed_in_time(handin) -> tuple[datetime | None, str]:
    """Rule: a hand-in without ``timestamp.txt`` (copied into ``submitted/`` by hand, not collected) was handed in
    when its newest notebook was last modified (the file's own time, never a text the student wrote); the
    instructor gives another by writing ``timestamp.txt``. Returns the time (UTC, without zone, as nbgrader keeps
    it) and its ``timestamp.txt`` text; (None, "") without a readable notebook. ``handin``: a
    :class:`.files.Handin`."""
    times = [os.lstat(path).st_mtime for path, rel, _ in handin.files if rel.endswith(".ipynb")]
    if not times:
        return None, ""
    when = datetime.fromtimestamp(max(times), timezone.utc)
    return when.replace(tzinfo=None), trusted_timestamp(when)


def record_refusals(course: Path, assignment: str, refused: list[dict]) -> None:
    """Append what collect refused (and, marked ``taken``, the folders it re-dated) to the course's record, for the
    grade table's problems column."""
    if not refused:
        return
    with open(course / REFUSALS, "a", encoding="utf-8") as f:
        for entry in refused:
            f.write(json.dumps({"assignment": assignment, "at": time.time(), **entry}) + "\n")


def refusals(course: Path, assignment: str) -> dict[str, list[str]]:
    """Student id -> what collect refused of this assignment in that student's name, or handed in by that
    student's login in another's name (one line each)."""
    ids = {login: student for student, login in logins_table(course).items()}
    found: dict[str, dict[str, str]] = {}
    try:
        lines = (course / REFUSALS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("assignment") != assignment:
            continue
        note = f"a hand-in {'re-dated' if rec.get('taken') else 'refused'} by collect: {rec.get('why', '')}"
        for who in {rec.get("student", ""), ids.get(rec.get("owner", ""), rec.get("owner", ""))} - {""}:
            found.setdefault(who, {})[rec.get("entry", "")] = note
    return {who: sorted(set(notes.values())) for who, notes in found.items()}
