"""A fault of the grader's environment is the grader's: never a student's score (issue 39).

Scratch courses whose grading environment is broken the way a real one can be: a judge that cannot import PyTorch
within its memory cap; a master whose setup cell reads a file of the course folder, which the judge has and a
kernel never does (as with a kernel that cannot read the course package, the master's own cell fails in every
kernel); kernels that cannot start in their memory cap (the kernel's own last words name the cause). Each class
holds the complete answer and the untouched release. Every hand-in must be reported NOT GRADED with the cause in
one line (the exception and where), the run must exit non-zero, and the gradebook must hold no score for anyone
(the grade table says "not graded", the Canvas export leaves it blank).
The hostile hand-in that breaks a locked cell with its own files (``extra-files``, a numpy.py beside the
notebook) is graded as usual in test_security: a locked cell failing because of the student is the student's.
"""

from __future__ import annotations

import pytest
from harness import course_autograde, read_scores, released_course

from attention_course.grading.course import gradebook_url
from attention_course.grading.run.progress import failure_cause, notable_lines
from attention_course.grading.run.tables import NOT_GRADED, autograded, canvas_table, score_table
from tools.submissions import BLANK, COMPLETE, read_notebook, write_class, write_notebook

A = "01_self_attention"
#: A line the master's setup cell gets in the "kernel" course: a file of the course folder (the judge runs in it).
READS_COURSE = f"open('source/{A}/{A[3:]}.ipynb').close()  # the judge has the course folder; a kernel never does"
BROKEN = {
    "judge": ("c.JudgedExecute.preload = []\nc.JudgedExecute.judge_memory_limit = 400 * 2**20\n",
              "EnvironmentFault: the master's locked cell 'setup' fails in the judge: ImportError"),
    "kernel": ("", "EnvironmentFault: the master's locked cell 'setup' fails in a kernel without the student's code: "
                   "FileNotFoundError"),
    "start": ("c.JudgedExecute.memory_limit = 500 * 2**20\n",  # less than the fork server's own imports
              "EnvironmentFault: a kernel could not start: the kernel exited while starting: Resource temporarily"),
}


@pytest.fixture(scope="module", params=sorted(BROKEN))
def broken(request, tmp_path_factory):
    config, cause = BROKEN[request.param]
    course = released_course(tmp_path_factory.mktemp(request.param), [A])
    with open(course / "nbgrader_config.py", "a") as f:
        f.write("\n" + config)
    if request.param == "kernel":
        master = course / "source" / A / f"{A[3:]}.ipynb"
        nb = read_notebook(master)
        setup = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
        setup["source"] = "".join(setup["source"]) + "\n" + READS_COURSE
        write_notebook(nb, master)
    write_class(course, A, {"complete": COMPLETE, "blank": BLANK})
    return course, cause, course_autograde(course, "-j", "1", check=False)


def test_every_hand_in_is_reported_not_graded_with_its_cause(broken):
    course, cause, run = broken
    assert run.returncode != 0, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if "NOT GRADED" in line]
    assert len(lines) == 2 and all(cause in line and "(at executor.py:" in line for line in lines), run.stderr[-3000:]
    assert "Traceback (most recent call last)" not in run.stderr, run.stderr[-3000:]


def test_nothing_is_recorded_as_a_students_score(broken):
    course, _, _ = broken
    from nbgrader.api import Gradebook

    url = gradebook_url(course)
    with Gradebook(url) as gb:
        assert not any(autograded(sub) for sub in gb.assignment_submissions(A)), read_scores(course, A)
    header, rows = score_table(url, [A], course)
    assert {row[0]: row[1] for row in rows} == {"blank": NOT_GRADED, "complete": NOT_GRADED}, rows
    _, canvas = canvas_table(url, [A])
    assert [row[-1] for row in canvas[1:]] == ["", ""], canvas


def test_a_traceback_in_the_log_becomes_one_line_with_its_cause():
    log = ("[INFO] working\n[ERROR] There was an error processing assignment: x\n"
           "[ERROR] Traceback (most recent call last):\n"
           '      File "/a/executor.py", line 12, in _start\n        self.go()\n'
           "    attention_course.grading.judging.executor.EnvironmentFault: the kernel exited while starting: boom\n    \n"
           "[WARNING] Removing failed assignment: y\n[WARNING] a real warning\n")
    assert notable_lines(log) == [
        "[ERROR] EnvironmentFault: the kernel exited while starting: boom (at executor.py:12 in _start)",
        "[WARNING] a real warning"]
    assert failure_cause({"log": log, "error": "NbGraderException: see the log"}) == \
        "EnvironmentFault: the kernel exited while starting: boom (at executor.py:12 in _start)"


def test_a_missing_layer_stops_grading_until_it_is_accepted(tmp_path):
    """Kernels that would run as root (``kernel_uid_base = 0`` on a root grader: the "user" layer is missing) stop
    the run before anything is graded, with what a hand-in could then do and how to go on; accepting that layer
    grades."""
    import os

    if os.geteuid() != 0:
        pytest.skip("kernels run as root only for a root grader")
    course = released_course(tmp_path, [A])
    with open(course / "nbgrader_config.py", "a") as f:
        f.write("\nc.JudgedExecute.kernel_uid_base = 0\n")
    write_class(course, A, {"blank": BLANK})
    refused = course_autograde(course, check=False)
    assert refused.returncode != 0 and "Not grading: the sandbox lacks user" in refused.stderr, refused.stderr[-2000:]
    assert "a hand-in runs as root" in refused.stderr and "ACCEPT=user" in refused.stderr, refused.stderr[-2000:]
    assert not (course / "autograded").exists() or not any((course / "autograded").iterdir())
    accepted = course_autograde(course, "--accept-missing", "user", "-j", "1", check=False)
    assert accepted.returncode == 0 and "Graded 1" in accepted.stderr, accepted.stderr[-2000:]
