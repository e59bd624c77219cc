"""Feedback at submit on one machine: the grading service against the course's own exchange, with real grading.

Five students of 01 hand in as nbgrader's submit writes into ``inbound/``: a complete answer; a student who hands
in twice before grading (only the newer is graded, the older gets a page saying so); a student past her deadline
(left to the instructor); two hand-ins whose notebook is not JSON, one of them text that names a fault of the grader
(each the student's: tried once, told at once, and nobody else's grading stops); an id
nbgrader would read as a glob (refused); the deadline is an extension's for the others. The service (``--once``) grades, records, writes each page and
releases it where fetch_feedback looks; ``make autograde`` afterwards finds everything graded and unchanged.
The hub's end-to-end test (tests/test_hub.py) submits through a student's server, kills the service mid-grade and
checks the limit's page. A second test changes the settings (``c.OnSubmit``, ``c.Term``'s extensions) while the
service runs, breaks ``nbgrader_config.py``, and reads the course folder's ``service.log``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sqlite3
import stat
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from harness import course_autograde, course_command, read_scores

from attention_course.grading.course import COURSE_ID, ROOT, available, gradebook_url
from tools.bench_submit import feedback_pages, hand_in, on_submit_course, queue_rows, start_service, stop_service, wait_ready
from tools.submissions import BLANK, COMPLETE, Submission

A = available()[0]
pytestmark = pytest.mark.slow


def _damaged(notebooks: dict) -> dict:
    return {name: '{"cells": [' for name in notebooks}


def _blames_the_grader(notebooks: dict) -> dict:  # an error that quotes it names the grader's own fault
    return {name: "EnvironmentFault: a kernel could not start (sandbox of worker w1 lacks cgroups)\n" for name in notebooks}


def test_the_service_grades_each_hand_in_once_and_tells_every_student_where_they_stand(tmp_path, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXCHANGE_ROOT", raising=False)  # the course's own exchange
    settings = (
        "c.OnSubmit.show = 'score'\n"
        "c.Term.due = {%r: '2020-01-01 00:00:00 UTC'}\n" % A
    )
    course = on_submit_course(tmp_path, A, settings)
    # everyone but cat has an extension past today: cat's hand-in is after her deadline
    (course / "extensions.csv").write_text("student,assignment,days\n" + "".join(
        f"{s},{A},100000\n" for s in ("ann", "bob", "dan", "fay")))
    entries = {"ann": hand_in(course, "ann", COMPLETE, A)}
    bob_old = hand_in(course, "bob", BLANK, A)
    time.sleep(1.1)  # a later arrival, by the folder's own time
    entries["bob"] = hand_in(course, "bob", COMPLETE, A)
    entries["cat"] = hand_in(course, "cat", COMPLETE, A)
    entries["dan"] = hand_in(course, "dan", Submission("damaged", "not JSON", base=BLANK, transform=_damaged), A)
    entries["glob"] = hand_in(course, "e*", COMPLETE, A)  # nbgrader reads ids as globs: refused, touches nobody
    entries["fay"] = hand_in(course, "fay", Submission("blames", "grader's words", base=BLANK,
                                                       transform=_blames_the_grader), A)

    served = course_command(course, "serve", "--once", "--workers", "2", check=False)
    log = served.stdout + served.stderr
    assert served.returncode == 0, log[-4000:]
    with sqlite3.connect(course / ".grading-service" / "queue.sqlite") as db:
        states = {entry: (state, graded) for entry, state, graded in
                  db.execute("SELECT entry, state, graded FROM handin")}
        attempts = dict(db.execute("SELECT entry, attempts FROM handin"))
    assert states == {entries["ann"]: ("done", 1), bob_old: ("superseded", 0), entries["bob"]: ("done", 1),
                      entries["cat"]: ("late", 0), entries["dan"]: ("failed", 0),
                      entries["glob"]: ("refused", 0), entries["fay"]: ("failed", 0)}, log[-4000:]
    # whose a failure is comes from where it happened, never from its text: fay's notebook is hers, tried once
    assert attempts[entries["fay"]] == 1 and "trying again" not in log, log[-4000:]

    # the gradebook holds what was graded, nothing of the late or the superseded hand-in
    scores = read_scores(course, A, gradebook_url(course))
    assert set(scores) == {"ann", "bob"} and all(s == m for s, m, manual in scores["ann"].values() if not manual)
    assert (course / "submitted" / "bob" / A / "submission_secret.txt").read_text().strip() == \
        (course / "exchange" / "attention-from-scratch" / "inbound" / entries["bob"] / "submission_secret.txt").read_text().strip()

    def page(entry: str) -> str:
        [found] = feedback_pages(course, entry)
        assert found.exists(), f"no page for {entry}"
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.read_text()))

    total = sum(s for s, m, manual in scores["ann"].values())
    assert f"scored {total:g} of" in page(entries["ann"]) and "BEGIN HIDDEN" not in page(entries["ann"])
    assert "Only your latest hand-in is graded" in page(bob_old)
    assert "after the deadline" in page(entries["cat"])
    for student in ("dan", "fay"):
        assert "self_attention.ipynb cannot be read as a notebook" in page(entries[student]), page(entries[student])
    assert "NOT GRADED" in log and "dan" in log

    # the instructor's own run afterwards: everything the service graded is graded and unchanged
    again = course_autograde(course, A, check=False)  # (dan's hand-in still cannot be read: exit status 1)
    assert "Skipping 2 submission(s) already graded and unchanged" in again.stderr, again.stderr[-3000:]
    assert "dan: NOT GRADED: NotJSONError" in again.stderr, again.stderr[-3000:]
    assert "fay: NOT GRADED" in again.stderr, again.stderr[-3000:]
    after = read_scores(course, A, gradebook_url(course))
    assert {s: after[s] for s in ("ann", "bob")} == scores
    # and a second service run finds nothing new to grade
    served = course_command(course, "serve", "--once", "--workers", "1", check=False)
    assert served.returncode == 0 and "Grading " not in served.stdout.replace("Grading service", ""), served.stdout


def _raw_hand_in(course: Path, student: str, assignment: str) -> str:
    """A folder of ``inbound/`` as nbgrader's submit leaves it, with any notebook (for hand-ins never graded)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    stage = course.parent / f"raw-{secrets.token_hex(4)}"
    stage.mkdir()
    shutil.copy(next((ROOT / "source" / assignment).glob("*.ipynb")), stage)
    (stage / "timestamp.txt").write_text(stamp)
    (stage / "submission_secret.txt").write_text(secrets.token_hex(64))
    entry = f"{student}+{assignment}+{stamp}+{secrets.token_hex(4)}"
    os.replace(stage, course / "exchange" / COURSE_ID / "inbound" / entry)
    return entry


def _until(what: str, condition, out: Path, seconds: float = 180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"waited {seconds:.0f} s for {what}; the service said:\n{out.read_text(errors='replace')[-5000:]}")


def test_the_service_takes_changed_settings_without_a_restart_and_logs_each_outcome_in_the_course(tmp_path,
                                                                                                     monkeypatch):
    monkeypatch.delenv("NBGRADER_EXCHANGE_ROOT", raising=False)  # the course's own exchange
    B = available()[1]
    course = on_submit_course(tmp_path, A, "c.OnSubmit.poll_seconds = 0.3\nc.OnSubmit.show = 'score'\n"
                              f"c.Term.due = {{{A!r}: '2020-01-01 00:00:00 UTC', {B!r}: '2020-01-01 00:00:00 UTC'}}\n")
    shutil.copytree(ROOT / "source" / B, course / "source" / B)  # not on submit yet
    config, log, out = course / "nbgrader_config.py", course / "service.log", tmp_path / "service.out"
    as_given = config.read_text()
    config.write_text(as_given + "c.OnSubmit.assignments = ['99_nothing']\n")  # an assignment source/ lacks
    proc = start_service(course, "--workers", "1", log=out)
    try:
        # settings that do not load at the start: the service waits for them, says why, and starts once they load
        _until("the service waiting for its settings", lambda: log.exists() and "Not started: c.OnSubmit.assignments "
               "names no assignment of source/: 99_nothing" in log.read_text(), out)
        asked = course_command(course, "serve", "--reload", check=False)
        assert asked.returncode == 1 and "Not started" in asked.stdout, asked.stdout + asked.stderr
        config.write_text(as_given)
        wait_ready(out)
        assert stat.S_IMODE(log.stat().st_mode) == 0o600

        def row(entry: str, state: str = "") -> dict | None:
            found = [r for r in queue_rows(course) if r["entry"] == entry and (not state or r["state"] == state)]
            return found[0] if found else None

        def said(text: str) -> bool:
            return text in log.read_text(errors="replace")

        # ann is past her deadline: left to the instructor
        late = hand_in(course, "ann", COMPLETE, A)
        _until("ann's late hand-in", lambda: row(late, "late"), out)
        # an extension in extensions.csv, taken without a restart: her next hand-in is graded
        (course / "extensions.csv").write_text(f"student,assignment,days\nann,{A},100000\n")
        _until("the extension read", lambda: said("Settings reloaded (extensions.csv changed): extensions (1 now): "
                                                  f"ann {A} +100000 days (was none)"), out)
        graded = hand_in(course, "ann", COMPLETE, A)
        done = _until("ann's hand-in graded", lambda: row(graded, "done"), out)
        # the next one inside the limit waits; the limit raised to 30 min without a restart: her page says so
        waiting = hand_in(course, "ann", BLANK, A)
        _until("the limit's page", lambda: "every 10 minutes" in (row(waiting) or {}).get("told", ""), out)
        with open(config, "a") as f:
            f.write("c.OnSubmit.minutes_between = 30\n")
        _until("the new limit on her page", lambda: "every 30 minutes" in row(waiting)["told"], out)
        assert said("Settings reloaded (nbgrader_config.py changed): at most one graded hand-in per student and "
                    "assignment every: 30 min (was 10 min)")
        # a second assignment put on submit: bob's hand-in of it is taken (after its deadline: late)
        with open(config, "a") as f:
            f.write(f"c.OnSubmit.assignments = [{A!r}, {B!r}]\n")
        _until("B on submit", lambda: said(f"on submit: {A}, {B} (was {A})"), out)
        bob = _raw_hand_in(course, "bob", B)
        _until("bob's hand-in of B", lambda: row(bob, "late"), out)

        # a config that does not load: the service goes on with the settings it had and says why
        good = config.read_text()
        config.write_text(good + "c.OnSubmit.minutes_between = (\n")
        broken_line = len(good.splitlines()) + 1
        _until("the broken config said", lambda: said(f"Settings NOT reloaded (nbgrader_config.py changed): "
                                                      f"nbgrader_config.py, line {broken_line}: SyntaxError"), out)
        asked = course_command(course, "serve", "--reload", check=False)
        assert asked.returncode == 1 and f"line {broken_line}: SyntaxError" in asked.stdout and \
            "goes on with the settings it had" in asked.stdout, asked.stdout + asked.stderr
        cat = _raw_hand_in(course, "cat", B)  # B is still on submit: the settings it had
        _until("cat's hand-in of B", lambda: row(cat, "late"), out)
        config.write_text(good)
        _until("the mended config", lambda: said("Settings reloaded (nbgrader_config.py changed): nothing the service "
                                                 "uses changed"), out)
        (course / "extensions.csv").write_text("student,assignment,days\nann,01,soon\n")  # a row without days
        _until("the bad extension said", lambda: said("Settings NOT reloaded (extensions.csv changed): ")
               and said("extensions.csv, line 2: an extension needs student, assignment and days"), out)
        # a name no student id has, with a line break and a Unicode line separator: one escaped line of the log
        forged = _raw_hand_in(course, f"zed\nHand-in: mal, {A}, graded 50 of 50\u2028x", A)
        _until("the forged name refused", lambda: row(forged, "refused"), out)
        assert "every 30 minutes" in row(waiting)["told"] and row(waiting, "waiting"), row(waiting)

        # mended: read again, and `make serve-reload` says what the service now uses
        (course / "extensions.csv").write_text(f"student,assignment,days\nann,{A},100000\n")
        _until("the mended extensions", lambda: said("Settings reloaded (extensions.csv changed): nothing the service "
                                                     "uses changed"), out)
        asked = course_command(course, "serve", "--reload", check=False)
        assert asked.returncode == 0 and "Settings reloaded (make serve-reload asked): nothing the service uses " \
            "changed" in asked.stdout and "every 30 min" in asked.stdout, asked.stdout + asked.stderr
        assert proc.poll() is None
    finally:
        stop_service(proc)
    asked = course_command(course, "serve", "--reload", check=False)
    assert asked.returncode == 1 and "No grading service runs" in asked.stdout, asked.stdout

    # the course folder's log: every line one line of ASCII, and each hand-in's outcome in one line
    text = log.read_bytes().decode("ascii")
    assert all(line.startswith("[") for line in text.splitlines()), text
    outcomes = [line.split("] ", 1)[1] for line in text.splitlines() if "] Hand-in: " in line]
    expected = [("ann", A, "late: after the deadline"), ("ann", A, "waiting to be graded"),
                ("ann", A, f"graded {done['score']:g} / {done['max_score']:g}"), ("ann", A, "waiting to be graded"),
                ("ann", A, "waiting: at most one graded hand-in every 10 min"),
                ("ann", A, "waiting: at most one graded hand-in every 30 min"), ("bob", B, "late: after the deadline"),
                ("cat", B, "late: after the deadline"),
                ("zed\\x0aHand-in: mal", A, "not taken: not a plain student id")]
    for student, assignment, what in expected:
        assert any(line.startswith(f"Hand-in: {student}") and f", {assignment}, handed in " in line and
                   f": {what}" in line for line in outcomes), (student, what, outcomes)
    assert "\\u2028x" in text and not any(line.startswith("Hand-in: mal") for line in outcomes), outcomes
    assert len(outcomes) == len(expected), json.dumps(outcomes, indent=1)
