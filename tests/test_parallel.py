"""The course's parallel autograde command (``make autograde``), against stock ``nbgrader autograde``.

One scratch course holds assignment 01 and four students of its demo class.
Stock ``nbgrader autograde`` grades it one assignment and one student after another; then the
course command grades it again with several workers, and every student's per-cell scores must be
the same. A second run skips everything; a changed hand-in is the only one graded again. Finally a
real PostgreSQL server on loopback takes the gradebook, with several workers writing at once, and a
real Dask scheduler with two workers on loopback grades the class into it without sharing a folder, and
into SQLite when one of the workers is killed mid-run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from harness import BIN, ONE_WORKER, api_calls, course_autograde, nbgrader, new_course, read_scores, release
from pgserver import HOW_TO_ENABLE, PostgresServer, server_bin

from attention_course.grading.course import available, catalogue_path
from attention_course.grading.run.tables import score_table
from tools.loopback import LoopbackCluster
from tools.submissions import demo_roster, load_catalogue, write_class

#: One assignment of the course (whose grades every other test already checks at length, and which the graded
#: class grades next to six others in one run): what is tested here is how the course command, PostgreSQL and Dask
#: schedule, record and skip work, which does not depend on it.
ASSIGNMENTS = [a for a in available() if a.startswith("01_")]
#: Four students of its demo class (the complete answer, the blank release and two of the demo's mistakes): enough
#: for three workers at once, for skipping, and for a Dask worker killed while both workers still grade; grades
#: are checked at length by the class of tests/test_grading.py.
STUDENTS = ("demo-complete", "demo-blank", "ada", "bruno")


def roster(assignment: str) -> dict:
    return {s: sub for s, sub in demo_roster(load_catalogue(catalogue_path(assignment))).items() if s in STUDENTS}


HANDINS = len(STUDENTS) * len(ASSIGNMENTS)


def all_scores(course, db_url=None) -> dict:
    return {a: read_scores(course, a, db_url) for a in ASSIGNMENTS}


def differences(got: dict, want: dict) -> list[str]:
    out = []
    for a in want:
        for student in sorted(set(want[a]) | set(got.get(a, {}))):
            if got.get(a, {}).get(student) != want[a].get(student):
                out.append(f"{a}/{student}: {got.get(a, {}).get(student)} != stock {want[a].get(student)}")
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Three students of each assignment's demo class, graded by stock ``nbgrader autograde`` (sequential)."""
    course = new_course(tmp_path_factory.mktemp("parallel"), ASSIGNMENTS)
    release(course, ASSIGNMENTS)
    for a in ASSIGNMENTS:
        write_class(course, a, roster(a))
    shutil.copytree(course / "submitted", course.parent / "submitted-as-handed-in")
    # what `nbgrader autograde <assignment>` does, one student after another, in one process
    api_calls(course, [("autograde", [a, student], {"force": True, "create": True}) for a in ASSIGNMENTS
                       for student in sorted(p.parent.name for p in (course / "submitted").glob(f"*/{a}"))])
    stock = all_scores(course)
    assert sum(len(s) for s in stock.values()) == HANDINS
    return course, stock


def test_course_command_writes_the_same_grades_and_skips_unchanged_work(demo):
    course, stock = demo
    first = course_autograde(course, "--workers", "3")  # no fingerprints yet: everything is graded
    assert f"Grading {HANDINS} submission(s)" in first.stderr and "with 3 worker(s)" in first.stderr, first.stderr[-3000:]
    assert f"{HANDINS}/{HANDINS}" in first.stderr and "ETA" in first.stderr and "submissions/s" in first.stderr
    assert not differences(all_scores(course), stock), "\n".join(differences(all_scores(course), stock))

    again = course_autograde(course)
    assert f"Skipping {HANDINS} submission(s)" in again.stderr and "Nothing to grade" in again.stderr, again.stderr[-3000:]

    # A student hands in again (here: the complete answer); only that hand-in is graded again.
    a = ASSIGNMENTS[0]
    for nb in (course / "submitted" / "demo-complete" / a).glob("*.ipynb"):
        shutil.copy(nb, course / "submitted" / "ada" / a / nb.name)
    third = course_autograde(course, "--workers", "2")
    assert f"Skipping {HANDINS - 1} submission(s)" in third.stderr and "Grading 1 submission(s)" in third.stderr, \
        third.stderr[-3000:]
    after = all_scores(course)
    assert after[a]["ada"] == stock[a]["demo-complete"], "the new hand-in was not graded as handed in"
    assert {s: v for s, v in after[a].items() if s != "ada"} == {s: v for s, v in stock[a].items() if s != "ada"}


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL server on loopback for this file's gradebooks (required on CI; skipped elsewhere
    without one)."""
    bindir = server_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail(HOW_TO_ENABLE)
        yield None
        return
    server = PostgresServer(bindir).start()
    try:
        yield server
    finally:
        server.stop()


def test_postgresql_gradebook_with_several_workers(demo, postgres, tmp_path):
    if postgres is None:
        pytest.skip(HOW_TO_ENABLE)
    course, stock = demo
    pg_course = tmp_path / "course"
    shutil.copytree(course, pg_course, ignore=shutil.ignore_patterns("gradebook.db", "autograded", "feedback",
                                                                     "submitted"))
    shutil.copytree(course.parent / "submitted-as-handed-in", pg_course / "submitted")
    url = postgres.create_database("gradebook")
    release(pg_course, ASSIGNMENTS, url)
    run = course_autograde(pg_course, "--workers", "3", "--db", url)
    assert f"Graded {HANDINS}" in run.stderr, run.stderr[-3000:]
    assert not differences(all_scores(pg_course, url), stock), "\n".join(differences(all_scores(pg_course, url),
                                                                                 stock))
    assert not (pg_course / "gradebook.db").exists(), "grades went to SQLite instead of PostgreSQL"
    header, rows = score_table(url, ASSIGNMENTS, pg_course)
    assert len(rows) == len(STUDENTS) and header[0] == "student"
    again = course_autograde(pg_course, "--db", url)
    assert "Nothing to grade" in again.stderr, again.stderr[-3000:]


def test_autograde_registers_what_the_gradebook_lacks_and_keeps_fingerprints_out_of_feedback(tmp_path):
    """A fresh course folder with hand-ins but no release: ``make autograde`` puts the assignment into
    the gradebook itself (without writing release/), grades, and prints no library warnings; feedback
    carries no grader files."""
    from tools.submissions import COMPLETE

    a = ASSIGNMENTS[0]
    course = new_course(tmp_path, [a])
    mistake = next(s for s in load_catalogue(catalogue_path(a)) if s.is_mistake)
    write_class(course, a, {"ann": COMPLETE, "ben": mistake})
    run = course_autograde(course, *ONE_WORKER)
    assert f"{a} is not in the gradebook yet: registering it" in run.stderr and "Graded 2" in run.stderr, \
        run.stderr[-3000:]
    assert not (course / "release").exists(), "registering must not write release/"
    for noise in ("Warning:", "SAWarning", "MissingIDFieldWarning"):
        assert noise not in run.stderr, f"autograde printed library warnings:\n{run.stderr[-3000:]}"
    scores = read_scores(course, a)
    assert all(s == m for s, m, manual in scores["ann"].values() if not manual)
    assert any(s < m for s, m, manual in scores["ben"].values() if not manual)
    nbgrader(course, "generate_feedback", a, "--force")
    shipped = [p.name for p in (course / "feedback").rglob("*") if p.is_file()]
    # the pages, and the exchange's metadata that release_feedback needs (autograde wrote the time it graded by)
    assert shipped and all(name.endswith(".html") or name in ("timestamp.txt", "submission_secret.txt")
                           for name in shipped), shipped


# -- Dask: a real scheduler and workers on loopback, each worker in its own empty folder ------------------
@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A scheduler and two workers for this file's Dask tests (the second kills a worker: it runs last)."""
    cluster = LoopbackCluster(tmp_path_factory.mktemp("dask") / "cluster", workers=2)
    try:
        yield cluster
    finally:
        cluster.stop()


def profiling(cluster) -> dict[str, bool | None]:
    """Worker address -> whether its statistical profiler (``distributed.worker.profile``) runs (None: the workers'
    configuration has it off, and this file's check of it cannot be made)."""
    from distributed import Client

    def running(dask_worker) -> bool | None:
        callbacks = [dask_worker.periodic_callbacks.get(name) for name in ("profile", "profile-cycle")]
        return None if None in callbacks else all(c.is_running() for c in callbacks)

    with Client(cluster.address, timeout="30s") as client:
        return client.run(running)


def test_dask_workers_without_a_shared_folder_grade_like_local(demo, postgres, dask_cluster, tmp_path):
    """The demo class graded through a real Dask scheduler and two workers on loopback, into a PostgreSQL
    gradebook that holds none of the assignments yet (the course command registers them first; the client is the
    gradebook's only writer): every per-cell grade equals local grading, the course's own folders are never touched
    by the workers (they grade in their own empty folders), and a second run skips everything. (The killed worker
    below grades into SQLite.)"""
    course, stock = demo
    dask_course = tmp_path / "course"
    shutil.copytree(course, dask_course, ignore=shutil.ignore_patterns("gradebook.db", "autograded", "feedback",
                                                                       "submitted"))
    shutil.copytree(course.parent / "submitted-as-handed-in", dask_course / "submitted")
    db = ("--db", postgres.create_database("gradebook_dask")) if postgres else ()
    cluster = dask_cluster
    before = profiling(cluster)
    assert all(v is True for v in before.values()), ("the workers should start with Dask's profiler on (its default; "
                                                     f"is distributed.worker.profile.enabled off here?): {before}")
    run = course_autograde(dask_course, "--scheduler", cluster.address, *db)
    assert "on the Dask cluster at tcp://127.0.0.1" in run.stderr and f"Graded {HANDINS}" in run.stderr, run.stderr[-3000:]
    assert f"{HANDINS}/{HANDINS}" in run.stderr and "ETA" in run.stderr
    got = all_scores(dask_course, *db[1:])
    assert not differences(got, stock), "\n".join(differences(got, stock))
    assert not db or not (dask_course / "gradebook.db").exists(), "grades went to SQLite instead of PostgreSQL"
    used = {m for m in re.findall(r"s, (tcp://[\d.:]+)\)", run.stderr)}
    assert len(used) == 2, f"both workers should have graded: {used}"
    after = profiling(cluster)
    assert not any(after.values()), f"a worker that graded still runs Dask's profiler: {after}"
    for home in cluster.workers:  # each worker graded in a scratch course of its own folder
        assert list(home.rglob("attention-course/source/*/*.ipynb")), f"{home} holds no scratch course"
    again = course_autograde(dask_course, "--scheduler", cluster.address, *db)
    assert f"Skipping {HANDINS} submission(s)" in again.stderr and "Nothing to grade" in again.stderr, again.stderr[-3000:]


def test_a_dask_worker_that_dies_mid_run_loses_nothing(demo, dask_cluster, tmp_path):
    """SIGKILL one of two workers (and its kernels) while it grades: its hand-ins are graded by the other,
    every hand-in is recorded exactly once, with the grades of local grading."""
    course, stock = demo
    some = ASSIGNMENTS
    dask_course = tmp_path / "course"
    shutil.copytree(course, dask_course, ignore=shutil.ignore_patterns("gradebook.db", "autograded", "feedback",
                                                                       "submitted"))
    for a in some:
        for folder in (course.parent / "submitted-as-handed-in").glob(f"*/{a}"):
            shutil.copytree(folder, dask_course / "submitted" / folder.parent.name / a)
    total = sum(len(stock[a]) for a in some)
    cluster = dask_cluster  # the workers of the test before: a course they have not graded yet
    assert len([n for n in cluster.procs if n.startswith("worker-")]) == 2, "the cluster lost a worker before this test"
    log_path = tmp_path / "autograde.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "attention_course.grading", "--course", str(dask_course),
                                 "autograde", "--scheduler", cluster.address], cwd=dask_course, stderr=log,
                                env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"))
        deadline = time.monotonic() + 300
        while f"2/{total}" not in log_path.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, f"the run ended before a worker could be killed:\n{log_path.read_text()}"
        cluster.kill("worker-1")  # it is grading: two hand-ins are left for the two workers (2 of 4 recorded)
        proc.wait(300)
    out = log_path.read_text()
    assert proc.returncode == 0 and f"Graded {total}, skipped 0 unchanged, failed 0" in out, out[-3000:]
    labels = re.findall(r"\d+/\d+ .*?  (\S+/\S+) \(", out)
    assert sorted(labels) == sorted(set(labels)) and len(labels) == total, f"recorded more than once:\n{out}"
    lost = cluster.folder / "scheduler.log"
    assert "worker-1" not in cluster.procs and "Remove worker" in lost.read_text(), lost.read_text()[-2000:]
    got = {a: read_scores(dask_course, a) for a in some}
    assert not differences(got, {a: stock[a] for a in some}), "\n".join(differences(got, stock))
