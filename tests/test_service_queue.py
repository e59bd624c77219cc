"""The grading service's queue without a grader: who is graded next, the limit, restarts (``make check``)."""

from __future__ import annotations

import subprocess
import sys

from attention_course.grading.course import ROOT
from attention_course.grading.nbgrader_glue.gradebook import Writer
from attention_course.grading.service.queue import Queue

LIMIT = 600.0


def _queue(tmp_path) -> Queue:
    return Queue(tmp_path / "queue.sqlite")


def test_a_hand_in_is_queued_once_however_often_it_is_seen(tmp_path):
    q = _queue(tmp_path)
    assert q.add("ann+01+t1+a", "01", "ann", 10.0)
    assert not q.add("ann+01+t1+a", "01", "ann", 99.0)
    assert q.row("ann+01+t1+a").seen == 10.0 and q.counts() == {"waiting": 1}


def test_only_the_newest_waiting_hand_in_of_a_student_is_graded(tmp_path):
    q = _queue(tmp_path)
    for i in range(10):
        q.add(f"ann+01+t{i}+a", "01", "ann", 10.0 + i)
    q.add("bob+01+t0+b", "01", "bob", 15.0)
    replaced = q.supersede()
    assert {row.entry for row, newer in replaced} == {f"ann+01+t{i}+a" for i in range(9)}
    assert all(newer == "ann+01+t9+a" for _, newer in replaced)
    # neither was graded before: in the order they came (bob's hand-in is older than ann's newest)
    assert [r.entry for r in q.ready(100.0, LIMIT)] == ["bob+01+t0+b", "ann+01+t9+a"]
    assert q.counts() == {"superseded": 9, "waiting": 2}


def test_the_limit_holds_a_second_hand_in_until_its_time(tmp_path):
    q = _queue(tmp_path)
    q.add("ann+01+t0+a", "01", "ann", 0.0)
    q.start("ann+01+t0+a", 5.0)
    q.finish("ann+01+t0+a", "done", 20.0, 95, 100)
    q.add("ann+01+t1+a", "01", "ann", 60.0)
    assert q.ready(100.0, LIMIT) == []
    [(row, at)] = q.held(100.0, LIMIT)
    assert row.entry == "ann+01+t1+a" and at == 5.0 + LIMIT
    assert [r.entry for r in q.ready(5.0 + LIMIT, LIMIT)] == ["ann+01+t1+a"]
    # the limit is per assignment: another assignment's hand-in is not held
    q.add("ann+02+t1+a", "02", "ann", 61.0)
    assert [r.entry for r in q.ready(100.0, LIMIT)] == ["ann+02+t1+a"]


def test_one_hand_in_per_student_at_a_time_and_the_least_recently_graded_first(tmp_path):
    q = _queue(tmp_path)
    q.add("ann+01+t0+a", "01", "ann", 0.0)
    q.start("ann+01+t0+a", 1.0)
    q.add("ann+02+t0+a", "02", "ann", 2.0)  # ann is being graded: her other assignment waits its turn
    q.add("bob+01+t0+b", "01", "bob", 3.0)
    assert [r.entry for r in q.ready(10.0, LIMIT)] == ["bob+01+t0+b"]
    q.finish("ann+01+t0+a", "done", 4.0)
    q.add("cat+01+t0+c", "01", "cat", 5.0)  # came after ann's, but cat has never been graded: first
    assert [r.entry for r in q.ready(10.0, LIMIT)] == ["bob+01+t0+b", "cat+01+t0+c", "ann+02+t0+a"]


def test_a_restart_puts_a_hand_in_back_with_its_slot_and_never_counts_a_grade_twice(tmp_path):
    q = _queue(tmp_path)
    q.add("ann+01+t0+a", "01", "ann", 0.0)
    q.start("ann+01+t0+a", 1.0)
    q.finish("ann+01+t0+a", "done", 2.0, 90, 100)
    q.add("ann+01+t1+a", "01", "ann", 1000.0)
    q.start("ann+01+t1+a", 1000.0)
    q.add("bob+01+t0+b", "01", "bob", 3.0)
    q.start("bob+01+t0+b", 3.0)
    q.recording("bob+01+t0+b")
    q.close()

    q = _queue(tmp_path)  # the service starts again
    recording = q.recover()
    assert [r.entry for r in recording] == ["bob+01+t0+b"]
    row = q.row("ann+01+t1+a")
    assert row.state == "waiting" and row.slot == 1000.0 and row.attempts == 1
    # its slot was granted before the restart: not held by the limit again
    assert [r.entry for r in q.ready(1001.0, LIMIT)] == ["ann+01+t1+a"]
    q.start("ann+01+t1+a", 1001.0)
    assert q.row("ann+01+t1+a").slot == 1000.0 and q.row("ann+01+t1+a").attempts == 2
    q.finish("ann+01+t1+a", "done", 1010.0, 95, 100)
    assert q.row("ann+01+t1+a").graded == 1


def test_a_hand_in_the_grader_failed_goes_behind_everyone_waiting(tmp_path):
    """A retry keeps its slot (the limit does not hold it twice) but never jumps the queue: however often the grader
    fails it, it is graded after every hand-in that was waiting when it was put back."""
    q = _queue(tmp_path)
    q.add("eve+01+t0+e", "01", "eve", 0.0)
    for i, student in enumerate(("ann", "bob", "cat")):
        q.add(f"{student}+01+t0+{student}", "01", student, 1.0 + i)
    assert q.ready(10.0, LIMIT)[0].entry == "eve+01+t0+e"  # she came first
    q.start("eve+01+t0+e", 10.0)
    q.retry("eve+01+t0+e", "tried again: the grader failed", behind=11.0)
    assert [r.entry for r in q.ready(12.0, LIMIT)] == ["ann+01+t0+ann", "bob+01+t0+bob", "cat+01+t0+cat",
                                                       "eve+01+t0+e"]
    for student in ("ann", "bob", "cat"):
        q.start(f"{student}+01+t0+{student}", 13.0)
        q.finish(f"{student}+01+t0+{student}", "done", 14.0, 90, 100)
    assert [r.entry for r in q.ready(20.0, LIMIT)] == ["eve+01+t0+e"] and q.row("eve+01+t0+e").attempts == 1
    q.add("dan+01+t0+d", "01", "dan", 21.0)  # came after eve's retry: after her
    assert [r.entry for r in q.ready(22.0, LIMIT)] == ["eve+01+t0+e", "dan+01+t0+d"]


def test_make_autograde_and_the_service_take_turns(tmp_path):
    service, run = Writer(tmp_path), Writer(tmp_path)
    assert service.acquire(block=False)
    assert not run.acquire(block=False)
    service.release()
    assert run.acquire(block=False)
    assert not service.acquire(block=False)
    run.release()


def test_a_hand_in_is_taken_once_submit_has_written_its_secret_or_never_will(tmp_path):
    import os

    from attention_course.grading.service.queue import SETTLE_S, settled

    folder = tmp_path / "ann+01+t0+a"
    folder.mkdir()
    (folder / "self_attention.ipynb").write_text("{}")
    came = os.lstat(folder).st_ctime
    assert not settled(tmp_path, folder.name, came + 1)  # submit is still writing: not looked at yet
    assert settled(tmp_path, folder.name, came + SETTLE_S)  # it never will: taken now, refused for the missing secret
    (folder / "submission_secret.txt").write_text("a" * 128)
    assert settled(tmp_path, folder.name, os.lstat(folder).st_ctime)  # written last by submit: complete
    assert not settled(tmp_path, "gone", came)
    (tmp_path / "eve+01+t0+b").symlink_to(folder)  # a link to a complete folder is never looked into
    assert not settled(tmp_path, "eve+01+t0+b", came + SETTLE_S)


def test_a_student_who_floods_inbound_delays_herself_only(tmp_path):
    """eve makes 50 folders at once: one round of the service looks at three of hers and at everybody else's,
    so ann's hand-in is queued in the same round; a folder whose name is not UTF-8 is said once and left alone."""
    import os

    from attention_course.grading.service.scan import PER_STUDENT, Scan

    inbound = tmp_path / "inbound"
    inbound.mkdir()
    for i in range(50):
        folder = inbound / f"eve+01+2026-01-01 00:00:{i:02d}.000000 UTC+e{i:02d}"
        folder.mkdir()
        (folder / "submission_secret.txt").write_text(f"e{i:02d}" * 8)
    (inbound / "zed+01+2026-01-01 00:00:00.000000 UTC+z").mkdir()
    (inbound / "zed+01+2026-01-01 00:00:00.000000 UTC+z" / "submission_secret.txt").write_text("z" * 32)
    os.mkdir(os.path.join(os.fsencode(inbound), b"odd+01+t+\xff"))
    said = []

    class Looked(Scan):
        assignments, shared, logins, ignore, course = ["01"], False, {}, None, tmp_path
        unreadable: set = set()

        def __init__(self):
            self.inbound, self.queue = inbound, _queue(tmp_path)
            self.log = said.append

        def _notice(self, row, title, paragraphs):
            pass

        def _outcome(self, row, what):
            said.append(what)

        def _owner(self, student):
            return None

        def _deadline(self, student, assignment):
            return None

    service = Looked()
    for _ in range(2):
        service.scan(10**10)
    students = [r.student for r in service.queue._rows("")]
    assert students.count("eve") == 2 * PER_STUDENT and students.count("zed") == 1, students
    assert sum("not valid UTF-8" in line for line in said) == 1, said


POOL_LOST_A_WORKER = """
import sys, time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

from attention_course.grading.service.workers import drop_pool


def slow(_):
    time.sleep(60)


if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
    first = pool.submit(slow, 0)
    time.sleep(1)
    waiting = [pool.submit(slow, b"x" * (4 << 20)) for _ in range(3)]  # megabytes, as the service's payload
    while not pool._processes:
        time.sleep(0.1)
    time.sleep(1)
    for process in list(pool._processes.values()):
        process.kill()  # the worker dies (the OOM killer, a crash) while a call is being written to it
    try:
        first.result(timeout=30)
    except BrokenProcessPool:
        drop_pool(pool)
        print("dropped", flush=True)
"""


def test_a_pool_that_lost_its_worker_is_dropped_without_hanging_the_service(tmp_path):
    """Python 3.11.2 (Debian 12's) hangs at exit after a pool lost a worker while a big call was being written into
    its pipe (the service's payload is megabytes): `drop_pool` closes that pipe's read end. Run with the course's
    Python (.ci/run makes it Debian's): without the close, this process never ends."""
    script = tmp_path / "pool.py"
    script.write_text(POOL_LOST_A_WORKER)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.strip() == "dropped", run.stderr[-2000:]


def test_a_settings_file_is_read_once_it_has_stopped_changing(tmp_path):
    """The service reads nbgrader_config.py and extensions.csv again when they change, but only once the new content
    has stayed the same for SETTLE_SECONDS: a file caught between its truncation and its writing (an empty
    extensions.csv, which would take every extension away for a moment) is not read; a file saved again and again
    with the same content is read once it settles; a file touched without a change is no change."""
    import os

    from attention_course.grading.service.settings import SETTLE_SECONDS, Watched

    extensions = tmp_path / "extensions.csv"
    extensions.write_text("student,assignment,days\n")
    watched = Watched.of([extensions])
    extensions.write_text("")  # truncated: the writer has not written yet
    assert watched.changed(now=100.0) == [] and watched.settling
    written = "student,assignment,days\nann,01_self_attention,3\n"
    extensions.write_text(written)  # written, a moment later
    assert watched.changed(now=100.0 + SETTLE_SECONDS * 0.9) == [], "new content since: its wait starts again"
    for i, at in enumerate((1.2, 1.5)):  # saved again with the same content (an autosave): the wait goes on
        extensions.write_text(written)
        os.utime(extensions, ns=(10**9 * (1000 + i), 10**9 * (1000 + i)))
        assert watched.changed(now=100.0 + SETTLE_SECONDS * at) == [], "not settled yet"
    assert watched.changed(now=100.0 + SETTLE_SECONDS * 2.0) == ["extensions.csv"]
    settled = Watched.of([extensions])
    os.utime(extensions, ns=(10**9 * 2000, 10**9 * 2000))  # touched, unchanged
    assert settled.changed(now=200.0) == [] and not settled.settling
    assert settled.changed(now=200.0 + SETTLE_SECONDS * 2) == []
