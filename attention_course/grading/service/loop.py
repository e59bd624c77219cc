"""Feedback at submit: ``python -m attention_course.grading serve`` grades each hand-in as it comes.

Runs as the instructor in the course folder (on JupyterHub a hub-managed service, deploy/jupyterhub/; else
``make serve``). Every ``poll_seconds`` it lists the exchange's ``inbound/`` and queues each new hand-in of an
assignment on submit (``c.OnSubmit``) whose owner and time the grader trusts (:func:`.trust.inbound_entries`). Then,
one hand-in at a time per student, it collects that hand-in alone (the course's patched collect), has a worker grade
it in the sandbox in a scratch course of the worker's own (:mod:`.workers`), records the executed notebooks
with nbgrader's ``Autograde`` (:func:`.cluster.recorder`: the service is the gradebook's one writer), writes the
student's feedback page and releases it. The policy, the queue (on disk: a restart loses nothing, grades nothing
twice, records no grade twice) and the limit are :mod:`.queue`'s; the pages a student gets before grading
are :mod:`.pages`'. Its settings (``c.OnSubmit``, ``c.Term``, the extensions CSV) are read again between
hand-ins when their files change or the instructor asks (``make serve-reload``), and kept when they do not load
(:mod:`.settings`); its log, each hand-in's outcome in one line, is ``service.log`` in the course folder
(:mod:`.log`). docs/grading.md, "Feedback at submit", says it for instructors.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures.process import BrokenProcessPool
from datetime import datetime, timezone
from pathlib import Path
from pwd import getpwnam

from .. import trust
from ..course import FINGERPRINT, STATE_DIR, exchange_root, gradebook_url
from ..errors import ConfigError, CourseError
from ..nbgrader_glue.collect import collect_one, handed_in, nbgrader_rules
from ..nbgrader_glue.gradebook import Writer, prepare_gradebook, refresh_tests, register, submission_score
from ..run.autograde import check_sandbox
from ..run.cluster import course_payload, read_tree, record, recorder
from ..run.outcome import GRADER, Outcome
from ..run.plan import course_fingerprint, grading_base, handin_fingerprint
from . import pages as pages
from .log import NAME as LOG_NAME
from .log import moment, outcome
from .pages import notice_page, publish, when
from .queue import Queue, Row, one_service
from .scan import Scan
from .settings import Reloads, Settings
from .settings import load as load_settings
from .workers import DaskWorkers, LocalWorkers, LogStream

#: How often a hand-in is tried again after its worker died or the grader's environment failed.
ATTEMPTS = 3


class Service(Scan, Reloads):
    """The grading service of one course (see the module's docstring). ``clock`` gives the time (the tests move it)."""

    def __init__(self, course: Path, workers: int | None = None, scheduler: str | None = None,
                 accept: frozenset | set = frozenset(), db_url: str | None = None, log=None, clock=time.time,
                 settings: Settings | None = None, lock=None):
        self.course = Path(course).resolve()
        os.chdir(self.course)
        said = log or (lambda text: print(f"[{datetime.now():%H:%M:%S}] {text}", flush=True))
        self.log = lambda text: said(trust.display_name(text))  # names from the exchange: control characters escaped
        self.clock = clock
        self.folder = self.course / STATE_DIR
        if lock is None:
            lock = one_service(self.folder)
        self._lock = lock
        self.settings = settings or load_settings(self.course)  # SettingsError: the caller says why, and waits
        self.app = self._nbgrader()
        self.db_url = db_url or gradebook_url(self.course)
        self.course_id = self.app.coursedir.course_id
        self.exchange = Path(exchange_root(self.course)) / self.course_id
        self.inbound = self.exchange / "inbound"
        self.shared = self.exchange.parent.resolve() != (self.course / "exchange").resolve()
        self.queue = Queue(self.folder / "queue.sqlite")
        self.writer = Writer(self.course)
        self.accept = set(accept)
        self.workers = workers or os.cpu_count() or 1
        self.scheduler = scheduler
        self.backend = None
        self.warming: list = []
        self.api = None
        self.flight: dict[str, tuple[object, str]] = {}  # entry -> (future, the hand-in's fingerprint)
        self.payloads: dict[str, dict] = {}
        self.logins = trust.logins_table(self.course)
        self.unreadable: set[str] = set()  # folders of inbound/ whose names cannot be read: said once
        self.said: dict[str, str] = {}  # entry -> the last outcome line said of it (each said once)
        self.broken = ""  # why the course's settings on disk do not load now ("" when they do)

        self.ignore = nbgrader_rules(self.app.coursedir)  # what collect's copy leaves out, the look leaves out too

    def _outcome(self, row: Row | None, what: str) -> None:
        """Say what became of a hand-in, in one line of the log (each outcome once)."""
        if row is None:
            return
        line = outcome(row.student, row.assignment, row.seen, what)
        if self.said.get(row.entry) != line:
            self.said[row.entry] = line
            self.log(line)

    # -- start and stop -------------------------------------------------------------------------------------
    def start(self) -> None:
        self.log(f"Grading service for {self.course} (exchange {self.exchange}); on submit: "
                 f"{', '.join(self.assignments) or 'nothing (c.OnSubmit.assignments is empty)'}; at most one graded "
                 f"hand-in per student and assignment every {self.policy.minutes_between:g} min; pages show "
                 f"{self.policy.show!r}; its log: {self.course / LOG_NAME}")
        check_sandbox(self.course, self.app, self.accept, LogStream(self.log))
        for row in self.queue.recover():  # a grade being recorded when the service stopped
            if self._recorded(row):
                self.log(f"{row.entry}: its grade was recorded before the restart; writing its feedback")
                self._feedback(row)
            else:
                self.queue.retry(row.entry, "grading interrupted by a restart")
        scratch = self.folder / "work"
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)  # the scratch courses of workers of an earlier run
        scratch.mkdir()
        if self.scheduler:
            self.backend = DaskWorkers(self.scheduler)
        else:
            self.backend = LocalWorkers(self.workers, scratch)
        payloads = []
        for assignment in self.assignments:
            try:
                payloads.append(self._payload(assignment))
            except CourseError as exc:  # the course's problem, said; its hand-ins wait until it is mended
                self.log(f"{assignment} cannot be graded yet: {exc}")
        self.warming = self.backend.warm(payloads) if payloads else []
        if not self.warming:
            self.log("Ready")

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
        self.writer.release()
        self.queue.close()

    def serve(self, once: bool = False, stop=lambda: False) -> dict:
        """Grade until ``stop()`` (or, with ``once``, until nothing is waiting or in flight); returns the queue's
        counts."""
        self.start()
        try:
            while not stop():
                worked = self.tick()
                if once and not self.flight and not self.queue.ready(float("inf"), self.interval):
                    break
                if not worked:
                    time.sleep(self.policy.poll_seconds)
            return self.queue.counts()
        finally:
            self.close()

    # -- one round -------------------------------------------------------------------------------------------
    def tick(self) -> bool:
        self._check_settings()  # between hand-ins: nothing is half-decided under the old settings
        now = self.clock()
        if self.warming and all(future.done() for future in self.warming):
            self.warming = []
            self.log(f"Ready: {self.backend.capacity} worker(s) warm")
        worked = self.scan(now)
        for row, newer in self.queue.supersede():
            self._outcome(row, f"replaced by a later hand-in ({newer}), which is the one graded")
            self._notice(row, *pages.replaced(row.seen))
        for row, at in self.queue.held(now, self.interval):
            self._outcome(row, f"waiting: at most one graded hand-in every {self.policy.minutes_between:g} min; "
                               f"next grading at {moment(at)}")
            self._notice(row, *pages.waiting(row.seen, self.policy.minutes_between, at))
        worked |= self._harvest()
        worked |= self._dispatch(now)
        if not self.flight:
            self.writer.release()  # a waiting `make autograde` may write now
        return worked

    def _payload(self, assignment: str) -> dict:
        if self.broken and assignment in self.payloads:
            return self.payloads[assignment]  # nbgrader_config.py does not load now: graded as under the one it had
        if self.broken:
            raise ConfigError(f"the course's settings do not load: {self.broken}")
        current = course_fingerprint(self.course, assignment)
        if self.payloads.get(assignment, {}).get("fingerprint") != current:
            prepare_gradebook(self.course, self.db_url, self.course_id, [assignment], set(), LogStream(self.log))
            refresh_tests(self.course, self.db_url, self.course_id, [assignment], register, LogStream(self.log))
            self.payloads[assignment] = course_payload(self.course, assignment, self.accept)
        return self.payloads[assignment]

    def _dispatch(self, now: float) -> bool:
        free = self.backend.capacity - len(self.flight)
        if free <= 0:
            return False
        ready = self.queue.ready(now, self.interval)
        if not ready:
            return False
        if not self.flight and self.writer.wanted:
            return False  # `make autograde` waits for its turn
        if not self.writer.acquire(block=False):
            return False
        for row in ready[:free]:
            self._grade(row, now)
        return True

    def _grade(self, row: Row, now: float) -> None:
        try:
            payload = self._payload(row.assignment)
        except CourseError as exc:  # the course's own problem (a test that cannot be registered): not the student's
            self._outcome(row, f"waiting: the course cannot grade it yet: {exc}")
            self.queue.retry(row.entry, f"the course: {exc}")
            return

        problem = self._collect(row)
        if problem.startswith("refused: "):
            self.queue.finish(row.entry, "refused", now, note=problem[len("refused: "):])
            self._outcome(row, f"not taken: {problem[len('refused: '):]}")
            self._notice(row, *pages.not_taken(row.seen, problem[len("refused: "):]))
            return
        if problem.startswith("error: "):  # the grader's own failure: tried again, behind the queue
            self.queue.start(row.entry, now)
            self._again(self.queue.row(row.entry), problem)
            return
        if problem:
            replaced = problem.startswith("newer")
            self.queue.finish(row.entry, "superseded" if replaced else "failed", now, note=problem)
            self._outcome(row, f"replaced by a later hand-in: {problem}" if replaced else f"NOT GRADED: {problem}")
            return
        came, deadline = handed_in(self.course, row.student, row.assignment), self._deadline(row.student, row.assignment)
        if came is not None and deadline is not None and came > deadline:  # changed after the look that queued it
            self.queue.finish(row.entry, "late", now, note="changed after the deadline: for the instructor's commands")
            self._outcome(row, f"late: changed at {moment(came)}, after the deadline ({moment(deadline)}); left to "
                               "the instructor's commands")
            self._notice(row, *pages.late(came, deadline, changed=True))
            return
        prepare_gradebook(self.course, self.db_url, self.course_id, [row.assignment], {row.student},
                          LogStream(self.log))
        try:
            handin = read_tree(self.course / "submitted" / row.student / row.assignment)
        except (OSError, ValueError) as exc:
            self.queue.finish(row.entry, "failed", now, note=f"the hand-in could not be read: {exc}")
            self._outcome(row, f"NOT GRADED: the hand-in could not be read: {exc}")
            return
        self.queue.start(row.entry, now)
        self.flight[row.entry] = (self.backend.submit(payload, row.student, handin),
                                  self._fingerprint(row, payload["fingerprint"]))
        self.log(f"Grading {row.student}'s hand-in of {row.assignment}")

    def _owner(self, student: str) -> int | None:
        """The uid a hand-in of ``student`` must belong to (None on one user's own exchange)."""
        if not self.shared:
            return None
        try:
            return getpwnam(trust.login_of(student, self.logins)).pw_uid
        except KeyError:
            return -1  # no such user: no folder is theirs

    def _deadline(self, student: str, assignment: str) -> float | None:
        due = self.term.deadline(student, assignment)
        return None if due is None else due.replace(tzinfo=timezone.utc).timestamp()

    def _fingerprint(self, row: Row, course_print: str = "") -> str:
        """What ``make autograde`` compares to skip the hand-in (:func:`.plan.handin_fingerprint`)."""
        base = grading_base(self.course, self.db_url, self.course_id, row.assignment, course_print)
        return handin_fingerprint(self.course, row.assignment, row.student, base, self.term)

    def _collect(self, row: Row) -> str:
        """Collect this hand-in alone into ``submitted/`` (:func:`.collect.collect_one`)."""
        return collect_one(self._api(), row.assignment, row.student, row.entry, self.shared)

    def _api(self):
        if self.api is None:
            self.api = self._recorder()
        return self.api

    def _recorder(self):
        return recorder(self.course, self.db_url, self.folder / "delivered")

    def _harvest(self) -> bool:
        """Record every hand-in whose worker has finished."""
        done = [entry for entry, (future, _) in self.flight.items() if future.done()]
        for entry in done:
            future, mark = self.flight.pop(entry)
            row = self.queue.row(entry)
            try:
                result = future.result()
            except Exception as exc:  # the worker died, or the cluster lost the hand-in: the grader's fault
                if isinstance(exc, BrokenProcessPool):
                    self.backend.broken()
                self._again(row, f"{type(exc).__name__}: {exc}")
                continue
            if not result.success:  # whose failure: the worker's status, never the error's text
                if result.status == GRADER:
                    self._again(row, "; ".join(result.faults or ["the grader's environment"])[-500:])
                    continue

                cause = result.cause()
                self.queue.finish(entry, "failed", self.clock(), note=cause)
                self._outcome(row, f"NOT GRADED: {cause}")
                self._notice(row, *pages.not_graded(row.seen, result.unreadable))
                continue
            self._record(row, result, mark)
        return bool(done)

    def _again(self, row: Row, why: str) -> None:
        if row.attempts >= ATTEMPTS:
            self.queue.finish(row.entry, "failed", self.clock(), note=f"the grader failed {row.attempts} times: {why}")
            self._outcome(row, f"NOT GRADED after {row.attempts} attempts of the grader: {why}")
            self._notice(row, *pages.not_graded(row.seen, []))
        else:
            self.queue.retry(row.entry, f"tried again: {why}", behind=self.clock())
            self.log(f"{row.entry}: the grader failed ({why}); trying again")

    def _record(self, row: Row, result: Outcome, mark: str) -> None:
        self.queue.recording(row.entry)
        started = time.monotonic()
        recorded = record(self._api(), self.folder / "delivered", result)
        if not recorded.success:
            cause = recorded.cause()
            self.queue.finish(row.entry, "failed", self.clock(), note=f"recording failed: {cause}")
            self._outcome(row, f"NOT GRADED: its grade could not be recorded: {cause}")
            return
        folder = self.course / "autograded" / row.student / row.assignment
        if folder.is_dir():
            (folder / FINGERPRINT).write_text(mark + "\n")
        self._feedback(self.queue.row(row.entry), f"worker {result.seconds:.1f} s, recorded in "
                                                  f"{time.monotonic() - started:.1f} s")

    def _recorded(self, row: Row) -> bool:
        mark = self.course / "autograded" / row.student / row.assignment / FINGERPRINT
        try:
            return mark.read_text().strip() == self._fingerprint(row)
        except OSError:
            return False

    def _feedback(self, row: Row, timing: str = "") -> None:
        """Write and release the student's feedback page; the hand-in is done."""
        started = time.monotonic()
        api = self._api()
        score, max_score, pending = submission_score(self.db_url, self.course_id, row.assignment, row.student)
        made = api.generate_feedback(row.assignment, row.student, force=True)
        pages = sorted((self.course / "feedback" / row.student / row.assignment).glob("*.html"))
        if not made.get("success") or not pages:
            self.log(f"{row.entry}: graded ({score:g} / {max_score:g}) but its feedback page failed: "
                     f"{(made.get('error') or '')[-300:]}")
        elif self.policy.show == "score":
            waiting = f" {pending} written answer(s) wait for your instructor's grading." if pending else ""
            text = notice_page("Your score", [
                f"Your hand-in of {when(row.seen)} scored {score:g} of {max_score:g} points.{waiting}",
                "The checks' messages are shown after the deadline."])
            for page in pages:
                page.write_text(text, encoding="utf-8")
        released = api.release_feedback(row.assignment, row.student)
        if not released.get("success"):
            self.log(f"{row.entry}: its feedback was not released: {(released.get('error') or '')[-300:]}")
        self.queue.finish(row.entry, "done", self.clock(), score, max_score)
        waiting = f", {pending} written answer(s) to grade by hand" if pending else ""
        self._outcome(row, f"graded {score:g} / {max_score:g}{waiting}; feedback released "
                           f"{self.clock() - row.seen:.1f} s after it came ({timing + ', ' if timing else ''}feedback "
                           f"{time.monotonic() - started:.1f} s)")

    def _notice(self, row: Row | None, title: str, paragraphs: list[str]) -> None:
        """Publish a notice as the feedback of the hand-in ``row`` (:func:`.pages.publish`), once per text."""
        if row is None:
            return
        text = notice_page(title, paragraphs)
        if row.told == text:
            return
        if self.queue.shared_secret(row):  # its page would be another student's too: nobody's is replaced
            self.log(f"{row.entry}: no notice published: another student's hand-in came with the same secret")
            self.queue.told(row.entry, text)
            return
        released = sorted(p.name for p in (self.course / "release" / row.assignment).glob("*.ipynb"))
        _, present, _ = trust.inbound_view(self.inbound, row.entry, self._owner(row.student), released)
        waits = publish(self.exchange / "feedback", row.secret, [Path(n).stem for n in present], text)
        if waits:
            self.log(f"{row.entry}: its page waits: {waits}")
        else:
            self.queue.told(row.entry, text)
