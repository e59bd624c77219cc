"""The grading service's queue: every hand-in it has seen, what became of it, and who is graded next.

One SQLite file in the service's folder (``<course>/.grading-service/queue.sqlite``), written by the service
alone. A row is one folder of the exchange's ``inbound/`` (its name is the key, so a hand-in is queued once however
often the service restarts); its state moves

    waiting -> grading -> recording -> done | failed
    waiting -> superseded   (the same student handed in again before it was graded: the newer one is graded)
    late | refused          (never graded by the service: after the student's deadline, or refused by collect)

``grading`` is a worker's; a restart puts such rows back to ``waiting`` with the slot they already had, so the
limit never delays a hand-in twice. ``recording`` is the gradebook's: the caller decides on restart whether the
grade reached the gradebook (:meth:`Queue.unfinished`). Fairness is the order :meth:`Queue.ready` returns: one hand-in
per student at a time, at most one graded per student and assignment every ``interval`` seconds, students whose last
grading is oldest first, then the order they handed in.
"""

from __future__ import annotations

import fcntl
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from traitlets import Enum, Float, List, Unicode
from traitlets.config import Configurable

from ..errors import AlreadyRunning
from ..trust import inbound_view

#: States whose hand-in is no longer the service's business.
FINAL = ("done", "failed", "superseded", "late", "refused")
#: States in which a hand-in occupies a worker or the gradebook.
BUSY = ("grading", "recording")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS handin (
    entry TEXT PRIMARY KEY,          -- the folder's name in inbound/
    assignment TEXT NOT NULL,
    student TEXT NOT NULL,
    seen REAL NOT NULL,              -- when it came (the latest inode change in it), seconds since the epoch
    state TEXT NOT NULL,
    slot REAL,                       -- when its grading was first started (what the limit counts)
    attempts INTEGER NOT NULL DEFAULT 0,
    graded INTEGER NOT NULL DEFAULT 0,   -- how many times its grade was recorded (1 when done)
    finished REAL,
    score REAL,
    max_score REAL,
    note TEXT NOT NULL DEFAULT '',   -- for the instructor: why it failed, which hand-in replaced it
    told TEXT NOT NULL DEFAULT '',   -- the last notice published to the student for it
    behind REAL,                     -- put back after the grader failed it: waits behind everyone waiting then
    secret TEXT NOT NULL DEFAULT ''  -- its submission secret when first seen: the name its notices are published under
);
CREATE INDEX IF NOT EXISTS by_student ON handin (assignment, student, state);
"""


@dataclass
class Row:
    entry: str
    assignment: str
    student: str
    seen: float
    state: str
    slot: float | None
    attempts: int
    graded: int
    finished: float | None
    score: float | None
    max_score: float | None
    note: str
    told: str
    behind: float | None = None
    secret: str = ""


class Queue:
    """The service's persistent queue (see the module's docstring)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), timeout=60, isolation_level=None)  # autocommit: every step is durable
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(_SCHEMA)
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(handin)")}  # a queue of an earlier run
        if "behind" not in columns:
            self.db.execute("ALTER TABLE handin ADD COLUMN behind REAL")
        if "secret" not in columns:
            self.db.execute("ALTER TABLE handin ADD COLUMN secret TEXT NOT NULL DEFAULT ''")

    def close(self) -> None:
        self.db.close()

    def _rows(self, sql: str, *args) -> list[Row]:
        return [Row(*r) for r in self.db.execute(f"SELECT entry, assignment, student, seen, state, slot, attempts, "
                                                 f"graded, finished, score, max_score, note, told, behind, secret FROM handin {sql}",
                                                 args)]

    def row(self, entry: str) -> Row | None:
        rows = self._rows("WHERE entry = ?", entry)
        return rows[0] if rows else None

    def known(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT entry FROM handin")}

    def add(self, entry: str, assignment: str, student: str, seen: float, state: str = "waiting",
            note: str = "", secret: str = "") -> bool:
        """Queue a hand-in (once: False if it was known)."""
        cur = self.db.execute("INSERT OR IGNORE INTO handin (entry, assignment, student, seen, state, note, secret) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)", (entry, assignment, student, seen, state, note, secret))
        return cur.rowcount == 1

    def shared_secret(self, row: Row) -> bool:
        """Whether another student's hand-in came with the same submission secret (a page published under it would
        be theirs too)."""
        return bool(row.secret) and self.db.execute(
            "SELECT 1 FROM handin WHERE secret = ? AND student != ? LIMIT 1", (row.secret, row.student)).fetchone() \
            is not None

    def recover(self) -> list[Row]:
        """After a restart: hand-ins a worker held go back to waiting (their slot kept); returns the rows whose
        grade was being recorded, for the caller to finish or put back (:meth:`retry`)."""
        self.db.execute("UPDATE handin SET state = 'waiting' WHERE state = 'grading'")
        return self._rows("WHERE state = 'recording'")

    def supersede(self) -> list[tuple[Row, str]]:
        """Of a student's hand-ins of one assignment waiting without a slot, only the newest stays waiting; returns
        each replaced row with the entry that replaced it."""
        replaced = []
        waiting = self._rows("WHERE state = 'waiting' AND slot IS NULL ORDER BY seen, entry")
        newest: dict[tuple[str, str], Row] = {}
        for row in waiting:
            newest[(row.assignment, row.student)] = row
        for row in waiting:
            latest = newest[(row.assignment, row.student)]
            if row.entry != latest.entry:
                self.db.execute("UPDATE handin SET state = 'superseded', note = ? WHERE entry = ?",
                                (f"replaced by {latest.entry}", row.entry))
                replaced.append((row, latest.entry))
        return replaced

    def last_slot(self, assignment: str, student: str, besides: str = "") -> float | None:
        """When the student's last grading of ``assignment`` started (what the limit counts from)."""
        value = self.db.execute("SELECT MAX(slot) FROM handin WHERE assignment = ? AND student = ? AND entry != ? "
                                "AND slot IS NOT NULL", (assignment, student, besides)).fetchone()[0]
        return value

    def next_time(self, row: Row, interval: float) -> float:
        """The earliest time ``row`` may be graded under the limit."""
        if row.slot is not None:
            return row.slot
        last = self.last_slot(row.assignment, row.student, row.entry)
        return row.seen if last is None else max(row.seen, last + interval)

    def ready(self, now: float, interval: float) -> list[Row]:
        """The waiting hand-ins that may be graded now, in the order to grade them (see the module's docstring)."""
        busy = {r[0] for r in self.db.execute(
            f"SELECT student FROM handin WHERE state IN ({','.join('?' * len(BUSY))})", BUSY)}
        rows = [r for r in self._rows("WHERE state = 'waiting'") if self.next_time(r, interval) <= now]
        chosen: dict[str, Row] = {}
        for row in sorted(rows, key=lambda r: (r.slot is None, r.seen, r.entry)):  # a held slot first
            if row.student not in busy:
                chosen.setdefault(row.student, row)

        def order(row: Row):  # a hand-in the grader failed queues again as if it came when it was put back
            last = self.db.execute("SELECT MAX(slot) FROM handin WHERE student = ? AND entry != ?",
                                   (row.student, row.entry)).fetchone()[0]
            came = row.seen if row.behind is None else row.behind
            return (row.slot is None or row.behind is not None, -1.0 if last is None else last, came, row.entry)

        return sorted(chosen.values(), key=order)

    def held(self, now: float, interval: float) -> list[tuple[Row, float]]:
        """Waiting hand-ins the limit holds back, each with when it may be graded."""
        return [(r, t) for r in self._rows("WHERE state = 'waiting'") if (t := self.next_time(r, interval)) > now]

    def start(self, entry: str, now: float) -> None:
        self.db.execute("UPDATE handin SET state = 'grading', slot = COALESCE(slot, ?), attempts = attempts + 1 "
                        "WHERE entry = ?", (now, entry))

    def recording(self, entry: str) -> None:
        self.db.execute("UPDATE handin SET state = 'recording' WHERE entry = ?", (entry,))

    def retry(self, entry: str, note: str, behind: float | None = None) -> None:
        """Back to waiting, its slot kept (a fault of the grader's environment: the student is not charged); with
        ``behind`` (now), after every hand-in waiting now: a retry never jumps the queue."""
        self.db.execute("UPDATE handin SET state = 'waiting', note = ?, behind = COALESCE(?, behind) WHERE entry = ?",
                        (note, behind, entry))

    def finish(self, entry: str, state: str, now: float, score: float | None = None, max_score: float | None = None,
               note: str = "") -> None:
        assert state in FINAL, state
        self.db.execute("UPDATE handin SET state = ?, finished = ?, score = ?, max_score = ?, note = ?, "
                        "graded = graded + ? WHERE entry = ?",
                        (state, now, score, max_score, note, 1 if state == "done" else 0, entry))

    def told(self, entry: str, text: str) -> None:
        self.db.execute("UPDATE handin SET told = ? WHERE entry = ?", (text, entry))

    def counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT state, COUNT(*) FROM handin GROUP BY state").fetchall())


#: How long a folder of ``inbound/`` may stay without its ``submission_secret.txt`` (nbgrader's submit writes it
#: last) before it is taken for a hand-in that will never be complete.
SETTLE_S = 60


def settled(inbound: Path, entry: str, now: float) -> bool:
    """Whether nbgrader's submit has finished writing the folder ``entry`` of ``inbound`` (its secret is written
    last), or has had :data:`SETTLE_S` seconds to (read through file descriptors: :func:`.trust.inbound_view`)."""
    secret, _, ctime = inbound_view(inbound, entry)
    if not ctime:
        return False
    return secret is not None or now - ctime >= SETTLE_S


# -- one writer of the gradebook at a time -------------------------------------------------------------


# -- the instructor's policy ---------------------------------------------------------------------------
class OnSubmit(Configurable):
    """Feedback at submit (``c.OnSubmit.<name>`` in nbgrader_config.py; the service reads it when it starts and again
    when the file changes: :mod:`.settings`)."""

    assignments = List(Unicode(), help="Assignment ids graded as they are handed in (none: the service grades "
                                       "nothing). After an assignment's deadline the instructor's commands take "
                                       "over.").tag(config=True)
    minutes_between = Float(10.0, help="At most one graded hand-in per student and assignment this often: a hand-in "
                                       "within it waits, and its student is told until when.").tag(config=True)
    show = Enum(["page", "score"], default_value="page",
                help="What a page before the deadline shows: 'page' (the course's feedback page: scores and the "
                     "message of each failed check, never hidden tests) or 'score' (the score alone).").tag(config=True)
    poll_seconds = Float(1.0, help="How often the exchange is looked at.").tag(config=True)


def one_service(folder: Path):
    """The course's service lock (``<folder>/service.lock``, the folder made 0700), held for the service's life;
    :class:`.AlreadyRunning` when another service holds it."""
    folder.mkdir(exist_ok=True)
    folder.chmod(0o700)
    lock = open(folder / "service.lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise AlreadyRunning(f"A grading service already runs for this course ({folder / 'service.lock'})") from None
    return lock
