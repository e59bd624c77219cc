"""Feedback at submit on one machine: the grading service against the course's own exchange, with real grading.

Five students of 01 hand in as nbgrader's submit writes into ``inbound/``: a complete answer; a student who hands
in twice before grading (only the newer is graded, the older gets a page saying so); a student past her deadline
(left to the instructor); two hand-ins whose notebook is not JSON, one of them text that names a fault of the grader
(each the student's: tried once, told at once, and nobody else's grading stops); an id
nbgrader would read as a glob (refused); the deadline is an extension's for the others. The service (``--once``) grades, records, writes each page and
releases it where fetch_feedback looks; ``make autograde`` afterwards finds everything graded and unchanged.
The hub's end-to-end test (tests/test_hub.py) submits through a student's server, kills the service mid-grade and
checks the limit's page.
"""

from __future__ import annotations

import re
import sqlite3
import time

import pytest

from attention_course.grading.course import available, gradebook_url
from tools.bench_submit import feedback_pages, hand_in, on_submit_course
from tools.submissions import BLANK, COMPLETE, Submission

from harness import course_autograde, course_command, read_scores

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
