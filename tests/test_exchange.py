"""nbgrader's exchange out of the box: the whole cycle with real nbgrader commands, two students.

The instructor releases into the course-local exchange (``exchange/``, set in nbgrader_config.py);
each student fetches from their own folder, answers and submits; the instructor collects,
autogrades with the course command, writes and releases feedback; each student fetches it. A third
"student" plants a submission of links straight into the shared inbound: collect takes nothing of it, says why
and records the refusal for the grade table.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from datetime import timezone
from pathlib import Path

import pytest
from nbgrader.utils import parse_utc

from attention_course.grading.course import available, catalogue_path, gradebook_url, score_table
from attention_course.grading.trust.exchange import refusals
from tools.submissions import apply_submission, load_catalogue, solved_notebook

from harness import (
    BIN, COURSE_ID, ONE_WORKER, ROOT, answer_into, as_student, course_autograde, masters, nbgrader, new_course, read_scores, unix_users,
)

A = available()[0]
NOTEBOOK = "self_attention.ipynb"


def test_release_fetch_submit_collect_grade_and_return_feedback(tmp_path):
    course = new_course(tmp_path, [A])
    exchange = course / "exchange"
    nbgrader(course, "generate_assignment", A, "--force")
    assert exchange.is_dir(), "the course's configuration makes its exchange folder"
    nbgrader(course, "release_assignment", A, "--force")

    masters_ = masters(A)
    mistake = next(s for s in load_catalogue(catalogue_path(A)) if s.is_mistake)
    answers = {"ann": {n: solved_notebook(nb) for n, nb in masters_.items()},
               "ben": apply_submission(masters_, mistake)}
    for user, notebooks in answers.items():
        home = tmp_path / "home" / user
        home.mkdir(parents=True)
        listed = as_student(home, user, exchange, "list")
        assert A in listed.stdout + listed.stderr, listed
        as_student(home, user, exchange, "fetch_assignment", A)
        for name, nb in notebooks.items():
            fetched = home / A / name
            assert fetched.is_file(), f"{user} did not receive {name}"
            answer_into(fetched, nb)
        as_student(home, user, exchange, "submit", A)

    # a student who can write into the shared inbound plants a submission of links (to the master, /etc/passwd)
    eve = "+".join(["eve", *next((exchange / COURSE_ID / "inbound").iterdir()).name.split("+")[1:]])
    planted = exchange / COURSE_ID / "inbound" / eve
    planted.mkdir()
    (planted / NOTEBOOK).symlink_to(course / "source" / A / NOTEBOOK)
    (planted / "passwd.txt").symlink_to("/etc/passwd")
    (planted / "timestamp.txt").write_text(eve.split("+")[2])
    (planted / "submission_secret.txt").write_text("0" * 64)

    collected = nbgrader(course, "collect", A)
    assert "a symbolic link: nothing of it is collected" in collected.stdout + collected.stderr, collected.stderr[-3000:]
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["ann", "ben"], \
        "a hand-in of links left something in submitted/"
    assert "symbolic link" in " ".join(refusals(course, A)["eve"]), "the refusal is not on record for the grade table"
    graded = course_autograde(course, A, *ONE_WORKER)
    assert "Graded 2" in graded.stderr, graded.stderr[-3000:]
    scores = read_scores(course, A)
    assert all(s == m for s, m, manual in scores["ann"].values() if not manual), scores["ann"]
    assert {n for n, (s, m, manual) in scores["ben"].items() if not manual and s < m} == set(mistake.loses)
    nbgrader(course, "generate_feedback", A, "--force")
    nbgrader(course, "release_feedback", A)
    for user in answers:
        home = tmp_path / "home" / user
        as_student(home, user, exchange, "fetch_feedback", A)
        pages = list((home / A / "feedback").rglob("*.html"))
        assert pages, f"{user} received no feedback"
        assert not list((home / A / "feedback").rglob(".autograde-fingerprint"))


def test_on_a_shared_exchange_nobody_hands_in_as_anyone_else_or_earlier(tmp_path):
    """Real Unix users on a shared exchange (as on JupyterHub): ann hands in her work; eve plants a blank in ann's
    name dated 2099 (it would be ann's newest) and backdates her own to 2000. Collect takes ann's real hand-in, and
    eve's at the time she made it; it refuses the forgery, says so in its log and the grade table names it on both
    rows; the grades follow the real hand-ins."""
    tag = os.getpid()
    ann, eve = f"ann{tag}", f"eve{tag}"
    with unix_users(ann, eve) as uids:
        if uids is None:
            pytest.skip("needs root and useradd: the students are real Unix users")
        top = Path(tempfile.mkdtemp(prefix="attn-exchange-"))  # under /tmp: the students can reach it
        os.chmod(top, 0o755)
        exchange = top / "exchange"  # nbgrader needs it writable by all: release makes it 1777 (sticky, as /tmp)
        exchange.mkdir()
        course = new_course(tmp_path, [A])
        nbgrader(course, "generate_assignment", A, "--force")
        nbgrader(course, "release_assignment", A, "--force", f"--Exchange.root={exchange}")
        homes = {user: Path(f"/home/{user}") for user in (ann, eve)}
        reach = ":".join([os.path.realpath(sys.base_prefix), sys.prefix, str(ROOT), str(top), *map(str, homes.values())])

        def as_unix(user, uid, *cmd):
            env = ["env", "-i", f"HOME={homes[user]}", f"USER={user}", f"LOGNAME={user}", f"PATH={BIN}:/usr/bin:/bin",
                   "PYTHONDONTWRITEBYTECODE=1"]
            run = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "as_user.py"), "--user", str(uid),
                                  reach, "--", *env, *cmd], cwd=homes[user], capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, f"{' '.join(cmd)} as {user}:\n{run.stderr[-3000:]}"
            return run

        course_flags = [f"--course={COURSE_ID}", f"--Exchange.root={exchange}", "--log-level=WARN"]
        for user, uid in zip((ann, eve), uids):
            as_unix(user, uid, str(BIN / "nbgrader"), "fetch_assignment", A, *course_flags)
        answer_into(homes[ann] / A / NOTEBOOK, solved_notebook(masters(A)[NOTEBOOK]))
        os.chown(homes[ann] / A / NOTEBOOK, uids[0], uids[0])
        as_unix(ann, uids[0], str(BIN / "nbgrader"), "submit", A, *course_flags)
        inbound = exchange / COURSE_ID / "inbound"
        real = next(p.name for p in inbound.iterdir() if p.name.startswith(f"{ann}+"))  # even knowing its name (no
        # student can list inbound/; its entries are 0777, nbgrader's choice, so a name known lets their files go)
        plant = ("import os, shutil, sys\n"
                 "inbound, blank, real, entries = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]\n"
                 "for name in entries:\n"
                 "    os.mkdir(os.path.join(inbound, name))\n"
                 "    shutil.copy(blank, os.path.join(inbound, name))\n"
                 "    open(os.path.join(inbound, name, 'timestamp.txt'), 'w').write(name.split('+')[2])\n"
                 "    open(os.path.join(inbound, name, 'submission_secret.txt'), 'w').write('0' * 64)\n"
                 "for attempt in (lambda: os.rename(os.path.join(inbound, real), os.path.join(inbound, 'x')),\n"
                 "                lambda: os.rename(os.path.dirname(inbound), os.path.dirname(inbound) + '-x')):\n"
                 "    try:\n"
                 "        attempt()\n"
                 "        print('DONE')\n"
                 "    except OSError:\n"
                 "        print('REFUSED')\n")
        forged = f"{ann}+{A}+2099-01-01 00:00:00.000000 UTC+forged"
        early = f"{eve}+{A}+2000-01-01 00:00:00.000000 UTC+early"
        tried = as_unix(eve, uids[1], sys.executable, "-c", plant, str(inbound), str(homes[eve] / A / NOTEBOOK), real,
                        forged, early)
        assert tried.stdout.split() == ["REFUSED"] * 2, f"rename ann's hand-in, rename the course: {tried.stdout}"
        assert all(stat.S_IMODE(p.stat().st_mode) & stat.S_ISVTX for p in (exchange, inbound)), "not sticky"

        collected = nbgrader(course, "collect", A, f"--Exchange.root={exchange}")
        log = collected.stdout + collected.stderr
        assert f"claims to be by {ann} ({ann}) but is owned by {eve}" in log, log[-3000:]
        stamps = {u: (course / "submitted" / u / A / "timestamp.txt").read_text() for u in (ann, eve)}
        assert "2099" not in stamps[ann] and "2000" not in stamps[eve], stamps
        now = time.time()
        for user, stamp in stamps.items():
            seen = parse_utc(stamp.strip()).replace(tzinfo=timezone.utc).timestamp()
            assert abs(now - seen) < 600, f"{user}'s hand-in is dated {stamp}, not when it came"
        graded = course_autograde(course, A, *ONE_WORKER)
        assert "Graded 2" in graded.stderr, graded.stderr[-3000:]
        scores = read_scores(course, A)
        assert all(s == m for s, m, manual in scores[ann].values() if not manual), scores[ann]
        assert all(s == 0 for s, _, manual in scores[eve].values() if not manual), scores[eve]
        _, rows = score_table(gradebook_url(course), [A], course)
        problems = {r[0]: r[-1] for r in rows}
        assert f"owned by {eve}" in problems[ann] and f"owned by {eve}" in problems[eve], problems
        assert "re-dated by collect: its name says 2000-01-01" in problems[eve], problems
        shutil.rmtree(top, ignore_errors=True)
