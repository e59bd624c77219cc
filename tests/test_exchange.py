"""nbgrader's exchange out of the box: the whole cycle with real nbgrader commands, two students.

The instructor releases into the course-local exchange (``exchange/``, set in nbgrader_config.py);
each student fetches from their own folder, answers and submits; the instructor collects,
autogrades with the course command, writes and releases feedback; each student fetches it. A third
"student" plants a submission of links straight into the shared inbound: collect takes nothing of it, says why
and records the refusal for the grade table.
"""

from __future__ import annotations

import json
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
from harness import (
    BIN,
    COURSE_ID,
    ONE_WORKER,
    ROOT,
    answer_into,
    as_student,
    course_autograde,
    masters,
    nbgrader,
    new_course,
    read_scores,
    unix_users,
)
from harness import as_unix as harness_as_unix
from nbgrader.utils import parse_utc

from attention_course.grading.course import available, catalogue_path, gradebook_url
from attention_course.grading.run.tables import score_table
from attention_course.grading.trust.exchange import refusals
from tools.submissions import apply_submission, load_catalogue, solved_notebook

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

    # and one who learnt ann's secret hands in under it: her pages would be named as ann's and replace them
    ann_secret = next(p for p in (exchange / COURSE_ID / "inbound").iterdir() if p.name.startswith("ann+"))
    mal = exchange / COURSE_ID / "inbound" / "+".join(["mal", *ann_secret.name.split("+")[1:]])
    shutil.copytree(ann_secret, mal)

    collected = nbgrader(course, "collect", A)
    assert "a symbolic link: nothing of it is collected" in collected.stdout + collected.stderr, collected.stderr[-3000:]
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["ann", "ben"], \
        "a hand-in of links, or one under a classmate's secret, left something in submitted/"
    assert "symbolic link" in " ".join(refusals(course, A)["eve"]), "the refusal is not on record for the grade table"
    assert "another student's submission_secret.txt" in " ".join(refusals(course, A)["mal"]), refusals(course, A)
    assert "ann" not in refusals(course, A), "ann's own hand-in was refused for a secret mal copied"
    again = nbgrader(course, "collect", "--update", A)  # the same hand-ins again: nothing changes, nothing refused
    assert "Refused" not in again.stderr.replace("Refused eve", "").replace("Refused mal", ""), again.stderr[-2000:]
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
            return harness_as_unix(user, uid, homes[user], reach, *cmd)

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


#: A race whose swap lands after collect has read the file that triggers it (the racer was kept waiting on a busy
#: machine: race.py says LATE) shows nothing, and is run again, up to this many times in all.
RACE_ATTEMPTS = 5


def test_a_hand_in_changed_while_collect_copies_it_gives_the_grader_nothing(tmp_path):
    """eve races collect as an ordinary user on a shared exchange (the grader is root: every file is in its reach).
    Watching her own folder with inotify, the moment collect opens her large file she swaps (rename-exchange) a
    sub-folder for a link to a folder of the grader's (holding the master), then her whole folder for a link, then
    moves her folder away. Each
    time nothing from outside her folder reaches the course (no hidden test, not a byte of the master), her folder is
    refused and recorded, and her classmate's hand-in is collected."""
    from attention_course.grading.course import COURSE_ID as COURSE
    from attention_course.grading.deploy.hub import prepare_exchange

    tag = os.getpid()
    ann, eve = f"ann{tag}", f"eve{tag}"
    with unix_users(ann, eve) as uids:
        if uids is None:
            pytest.skip("needs root and useradd: the students are real Unix users")
        top = Path(tempfile.mkdtemp(prefix="attn-race-"))  # under /tmp: the students can reach it
        os.chmod(top, 0o755)
        exchange = top / "exchange"
        prepare_exchange(exchange, COURSE, "root")
        inbound = exchange / COURSE / "inbound"
        stash = top / "stash"  # eve's own folder beside the exchange (one file system: renames cross)
        stash.mkdir()
        os.chown(stash, uids[1], uids[1])
        course = new_course(tmp_path, [A])
        master = course / "source" / A
        assert b"BEGIN HIDDEN TESTS" in (master / NOTEBOOK).read_bytes()
        private = course / "private"  # a folder of the grader's holding files named like hers, the master among them
        private.mkdir(mode=0o700)
        shutil.copy(master / NOTEBOOK, private / NOTEBOOK)
        (private / "a.bin").write_bytes(b"grader's")
        blank = (ROOT / "release" / A / NOTEBOOK).read_bytes()

        def hand_in(user: str, uid: int, files: dict[str, bytes]) -> Path:
            entry = inbound / f"{user}+{A}+{time.strftime('%Y-%m-%d %H:%M:%S')}.000000 UTC+{os.urandom(4).hex()}"
            for rel, data in {**files, "timestamp.txt": b"2026-01-01 00:00:00.000000 UTC",
                              "submission_secret.txt": os.urandom(16).hex().encode()}.items():
                (entry / rel).parent.mkdir(parents=True, exist_ok=True)
                (entry / rel).write_bytes(data)
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(entry)], check=True)
            return entry

        hand_in(ann, uids[0], {NOTEBOOK: json.dumps(solved_notebook(masters(A)[NOTEBOOK])).encode()})
        reach = ":".join([os.path.realpath(sys.base_prefix), sys.prefix, str(ROOT), str(top)])
        big = os.urandom(24 * 2**20)  # copying it takes long enough for every swap to land mid-copy
        variants = {  # what eve's folder holds, the folder she watches and the file that triggers her
            "a sub-folder swapped for a link": ({NOTEBOOK: blank, "data/a.bin": big, f"data/{NOTEBOOK}": b"decoy"},
                                                "data", ["data", str(stash / "link")]),
            "her whole folder swapped for a link": ({"a.bin": big, NOTEBOOK: blank}, ".", [".", str(stash / "link")]),
            "her folder moved away": ({"a.bin": big, NOTEBOOK: blank}, ".", [".", str(stash / "gone"), "--remove"]),
        }

        def race(variant: str, files: dict, watched: str, swap: list) -> tuple[str, str]:
            """eve hands in ``files`` and races one collect: what the racer said, and collect's log."""
            for left in [p for p in inbound.iterdir() if p.name.startswith(f"{eve}+")] + list(stash.iterdir()):
                shutil.rmtree(left) if left.is_dir() and not left.is_symlink() else left.unlink()
            shutil.rmtree(course / "submitted", ignore_errors=True)
            (course / "collect-refused.jsonl").unlink(missing_ok=True)
            entry = hand_in(eve, uids[1], files)
            os.symlink(private, stash / "link")
            os.lchown(stash / "link", uids[1], uids[1])
            watch = entry / watched if watched != "." else entry
            a, b = [str(entry / x) if x == "data" else str(entry) if x == "." else x for x in swap[:2]]
            racer = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "tools" / "as_user.py"), "--user", str(uids[1]), reach, "--",
                 sys.executable, str(ROOT / "tests" / "tools" / "race.py"), str(watch), "a.bin", a, b, *swap[2:]],
                stdout=subprocess.PIPE, text=True)
            try:
                assert racer.stdout.readline().strip() == "READY", variant
                collected = nbgrader(course, "collect", A, f"--Exchange.root={exchange}", check=False)
                said = racer.stdout.readline().strip()
            finally:
                racer.kill()
                racer.wait()
            log = collected.stdout + collected.stderr
            assert collected.returncode == 0, f"{variant}: one folder stopped the collect: {log[-3000:]}"
            return said, log

        for variant, (files, watched, swap) in variants.items():
            for attempt in range(RACE_ATTEMPTS):
                said, log = race(variant, files, watched, swap)
                leaked = [p for p in course.rglob("*") if p.is_file() and p.stat().st_size < 2**22
                          and p.parent not in (master, private) and b"BEGIN HIDDEN TESTS" in p.read_bytes()]
                assert not leaked, f"{variant}: the master reached the course through eve's folder: {leaked}"
                if said == "SWAPPED":
                    break
                assert said == "LATE", f"{variant}: the race did not run ({said}): {log[-2000:]}"
            else:
                pytest.fail(f"{variant}: in {RACE_ATTEMPTS} tries the swap never landed before collect had read the "
                            "file that triggers it (a machine this busy cannot show the race)")
            assert not (course / "submitted" / eve).exists(), f"{variant}: something of eve's raced folder was taken"
            assert "changed while it was read" in " ".join(refusals(course, A).get(eve, [])), \
                f"{variant}: the refusal is not on record: {log[-3000:]}"
            assert (course / "submitted" / ann / A / NOTEBOOK).is_file(), f"{variant}: ann was not collected"
            assert not (course / ".collect-staging").exists(), "the staging folder outlives the collect"
        shutil.rmtree(top, ignore_errors=True)


def test_work_written_into_a_hand_in_after_the_deadline_is_late_from_the_write(tmp_path):
    """ann hands in a blank before the deadline and, after it, writes her answer into the same folder (the file
    changes, the folder does not); ben's hand-in holds a link, so the collect before the deadline refuses it, and
    after the deadline he removes the link. Collected after the deadline, each is late from that change, and loses
    the late share, although each folder was made before the deadline."""
    from datetime import datetime, timedelta, timezone

    from nbgrader.api import Gradebook

    course = new_course(tmp_path, [A])
    exchange = course / "exchange"
    nbgrader(course, "generate_assignment", A, "--force")
    nbgrader(course, "release_assignment", A, "--force")
    inbound = exchange / COURSE_ID / "inbound"
    entries = {}
    for user in ("ann", "ben"):
        home = tmp_path / "home" / user
        home.mkdir(parents=True)
        as_student(home, user, exchange, "fetch_assignment", A)
        if user == "ben":
            answer_into(home / A / NOTEBOOK, solved_notebook(masters(A)[NOTEBOOK]))
            (home / A / "data").mkdir()
            (home / A / "data" / "notes.txt").write_text("mine")
        as_student(home, user, exchange, "submit", A)
        entries[user] = next(p for p in inbound.iterdir() if p.name.startswith(f"{user}+"))
    (entries["ben"] / "data" / "link").symlink_to("/etc/hostname")  # in his own folder: refused whole
    early = nbgrader(course, "collect", A)
    assert not (course / "submitted" / "ben").exists(), early.stderr[-2000:]
    assert (course / "submitted" / "ann" / A / NOTEBOOK).is_file()
    due = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=2)  # after both hand-ins came
    with open(course / "nbgrader_config.py", "a") as f:  # (the term's due date is read when grading)
        f.write(f"\nc.Term.due = {{{A!r}: {due.strftime('%Y-%m-%d %H:%M:%S UTC')!r}}}\n")
    time.sleep(max(0.0, due.timestamp() - time.time()) + 2)
    answer_into(entries["ann"] / NOTEBOOK, solved_notebook(masters(A)[NOTEBOOK]))  # in place, after the deadline
    (entries["ben"] / "data" / "link").unlink()  # mended after the deadline
    nbgrader(course, "collect", "--update", A)
    for user in ("ann", "ben"):
        stamp = parse_utc((course / "submitted" / user / A / "timestamp.txt").read_text().strip())
        assert stamp.replace(tzinfo=timezone.utc) > due, f"{user}'s hand-in is dated {stamp}, before the deadline"
    course_autograde(course, A, *ONE_WORKER)
    with Gradebook(gradebook_url(course)) as gb:
        for user in ("ann", "ben"):
            assert gb.find_submission(A, user).total_seconds_late > 0, f"{user}'s hand-in is not late"
    header, rows = score_table(gradebook_url(course), [A], course)
    assert all("late" in " ".join(map(str, r)).lower() for r in rows if r[0] in ("ann", "ben")), (header, rows)


def test_a_hand_in_collected_again_for_a_retry_is_the_same_hand_in(tmp_path, monkeypatch):
    """The grading service collects a hand-in again when the grader failed it or the service restarted mid-grade:
    collect says it holds that very hand-in (graded then), never that a newer one replaced it."""
    from attention_course.grading.nbgrader_glue.collect import collect_one
    from attention_course.grading.run.cluster import recorder

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NBGRADER_EXCHANGE_ROOT", raising=False)
    course = new_course(tmp_path, [A])
    nbgrader(course, "generate_assignment", A, "--force")
    nbgrader(course, "release_assignment", A, "--force")
    home = tmp_path / "home" / "ann"
    home.mkdir(parents=True)
    as_student(home, "ann", course / "exchange", "fetch_assignment", A)
    as_student(home, "ann", course / "exchange", "submit", A)
    entry = next((course / "exchange" / COURSE_ID / "inbound").iterdir()).name
    monkeypatch.chdir(course)
    api = recorder(course, gradebook_url(course), tmp_path / "delivered")
    assert collect_one(api, A, "ann", entry, shared=False) == ""
    first = (course / "submitted" / "ann" / A / "timestamp.txt").read_text()
    assert collect_one(api, A, "ann", entry, shared=False) == "", "a retry found its own hand-in 'newer'"
    assert (course / "submitted" / "ann" / A / "timestamp.txt").read_text() == first
