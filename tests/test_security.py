"""Grading that cannot be gamed, leaks nothing, and survives any submission.

The session's one real autograde run (tests/conftest.py, ``the_class``) grades every assignment's catalogue
together with the hostile submissions of tests/catalogue/adversarial.py (a wrong answer plus an attack each,
on 01, 02 and 05), hand-in folders named like glob patterns and hand-in folders that are links. Then:
- every attack scores, cell by cell, no more than its wrong answer without the attack (graded in the same run),
  and exactly as much where it should;
- the catalogue's students, graded next to them, keep exactly the grades their answers earn (test_grading);
- ``source/`` and the other students' hand-ins are unchanged, no process is left behind;
- neither feedback nor anything the attacks printed shows hidden tests;
- attacks on time and memory finish within the configured limits, and no grading process
  (workers, judges; kernels have caps of their own) grows past a stated bound.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import ATTACKS, GRADED
from harness import CLASS_UID_BASE, JUDGE_BYTES, NOTEBOOK_S, course_autograde, feedback_text, tree_digest

from attention_course.grading.course import gradebook_url
from attention_course.grading.kernels.clock import STRETCH
from attention_course.grading.run.tables import format_table, score_table
from tools.submissions import read_notebook

sys.path.insert(0, str(Path(__file__).parent / "catalogue"))
import adversarial  # noqa: E402
from sandbox_attacks import survivors  # noqa: E402
from test_grading import auto_cells, hidden_lines  # noqa: E402

A = adversarial.ASSIGNMENT
#: The most resident memory any grading process (a worker, its judge processes, the fork server) may reach.
GRADER_RSS_BOUND = JUDGE_BYTES + 2**29
#: How long one hand-in may take beyond its notebook limit (kernel start, the judge's locked cells, recording).
MARGIN_S = 30


def judge_processes(tmp: Path) -> set[int]:
    """Processes whose working folder is a kernel scratch folder in the grader's temporary folder ``tmp`` (there
    should be none after grading; kernels of other tests, which may run at the same time, are elsewhere)."""
    found, scratch = set(), os.path.join(os.path.realpath(tmp), "attention-judge-")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(scratch):
                found.add(int(pid))
        except OSError:
            pass
    return found


def test_catalogue_covers_every_class():
    kinds = {a.kind for a in adversarial.ATTACKS}
    assert kinds == {"helpers", "cells", "detect", "read", "fault", "malformed", "files"}
    assert len(adversarial.ATTACKS) >= 20
    assert all(a.base in adversarial.BASES[a.assignment] and a.base_submission.is_mistake
               for a in adversarial.ATTACKS), "every attack is built on a wrong answer of its assignment"
    findings = {}
    for a in adversarial.ATTACKS:
        findings.setdefault(a.finding, []).append(a)
    for finding in ("1", "2", "3", "4", "6", "7", "8", "9", "10", "11", "12", "D2"):  # finding 5 is GLOB_IDS
        assert len(findings.get(finding, [])) >= 2, f"finding {finding} needs an attack and a variant"
    assert len(adversarial.GLOB_IDS) >= 2


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_attack_gains_nothing(hostile, graded, attack):
    run = hostile(attack.assignment)
    base = auto_cells(graded(attack.assignment).scores[attack.base])
    got = auto_cells(run["scores"].get(attack.name, {}))
    if not got:  # not graded at all: only acceptable for input nbgrader cannot read (reported in the table)
        assert attack.kind == "malformed", f"{attack.name} was not graded:\n{run['log'][-3000:]}"
        return
    if attack.finding == "8":  # the notebook itself was refused: every cell scores 0, its written answer too
        assert got and all(s == 0 for s, _ in got.values()), f"{attack.name} scored {got}"
        return
    assert got.keys() == base.keys(), f"{attack.name}: graded cells {sorted(got)} differ from {sorted(base)}"
    gained = {n: (got[n][0], base[n][0]) for n in base if got[n][0] > base[n][0]}
    assert not gained, f"{attack.description}: scores more than the wrong answer alone in {gained}"
    assert sum(s for s, _ in got.values()) <= sum(s for s, _ in base.values())
    if attack.exact:
        changed = {n: (got[n][0], base[n][0]) for n in base if got[n][0] != base[n][0]}
        assert not changed, f"{attack.description}: cells its attack does not touch changed: {changed}"


def test_the_catalogue_is_graded_next_to_the_hostile_students(the_class):
    """Every hostile hand-in was graded in the same run as the catalogue (whose tests, in test_grading, then show
    that nobody else's grade moved), and no catalogue student's hand-in is reported as a problem."""
    graded_students = {k.split("/", 1)[1] for k in the_class.seconds}
    assert {a.name for a in ATTACKS} - {"corrupt-json", "renamed-notebook"} <= graded_students
    header, rows = score_table(gradebook_url(the_class.course), GRADED, the_class.course)
    table = {r[0]: r for r in rows}
    catalogue = {s for g in the_class.graded.values() for s in g.students}
    assert all(not table[s][-1] for s in catalogue), format_table(header, rows)


def test_time_and_memory_stay_within_limits(the_class):
    """Attacks on the grader's time and memory (findings 3 and 4) end within the notebook limit, and no
    grading process outgrows the bound (a judge process is capped at JUDGE_BYTES of address space)."""
    peak, who = the_class.peak
    figures = {"peak_rss": peak, "process": str(who), "seconds": the_class.seconds}
    (the_class.course.parent / "limits.json").write_text(json.dumps(figures, indent=1))  # kept for the record
    for attack in (a for a in ATTACKS if a.finding in ("3", "4")):
        took = the_class.seconds.get(f"{attack.assignment}/{attack.name}")
        assert took is not None, f"no time reported for {attack.name}:\n{the_class.log[-2000:]}"
        # a limit charges what the hand-in had of the machine: by the wall clock at most STRETCH times as long
        assert took <= NOTEBOOK_S * STRETCH + MARGIN_S, f"{attack.name} took {took:.0f} s (limit {NOTEBOOK_S} s)"
    assert 0 < peak <= GRADER_RSS_BOUND, f"a grading process reached {peak / 2**30:.2f} GiB: {who!r}"


def test_a_blank_that_runs_the_courses_solutions_scores_what_the_blank_scores(hostile, graded):
    """The red team's hand-in: the untouched release whose answer cells look for the masters and the catalogues
    (by name and by search) and run every solution they find. A kernel is given its hand-in and the release, and
    sees nothing else of the course (trust.kernel_files, rootfs): it finds nothing."""
    got = auto_cells(hostile(A)["scores"]["blank-reads-source"])
    assert got == auto_cells(graded(A).scores["blank"]), got


def test_kernels_leave_no_shared_memory_on_the_host(the_class):
    """A hand-in left 64 MiB of System V shared memory for a classmate to take (shm-leaves-answer): each kernel has
    an IPC namespace of its own, so the classmate found nothing (its cells score as its wrong answer's, in
    test_attack_gains_nothing) and the host holds what it held before grading the class."""
    before, after = the_class.shared_memory
    assert abs(after - before) < 2**20, f"the host's System V shared memory went from {before} to {after} bytes"
    keys = [int(line.split()[0]) for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert adversarial.SHM_KEY not in keys, "a kernel's shared-memory segment outlived grading"


def test_glob_like_ids_touch_nobody(hostile):
    """Folders named like glob patterns are reported and skipped; every other hand-in is graded once,
    keeps its fingerprint, and a second run grades nothing."""
    run = hostile(A)
    course = run["course"]
    header, rows = score_table(gradebook_url(course), [A], course)
    problems = {r[0]: r[-1] for r in rows}
    for gid in adversarial.GLOB_IDS:
        assert gid not in run["scores"], f"{gid!r} was graded as a student"
        assert "not a plain student id" in problems[ascii(gid)], format_table(header, rows)
        assert (course / "submitted" / gid / A / adversarial.NOTEBOOK).is_file(), "a hand-in was lost"
    def graded(student):  # malformed hand-ins are never graded; those with refused files are (without them)
        return not [p for p in problems.get(student, "").split("; ") if p and not p.startswith(f"{A}: refused")]

    graded_students = [s for s in run["scores"] if graded(s)]
    for student in graded_students:
        assert (course / "autograded" / student / A / ".autograde-fingerprint").is_file(), \
            f"{student}'s fingerprint is gone"
    again = course_autograde(course, A, check=False).stderr
    skipped = re.search(r"Skipping (\d+) submission", again)
    assert skipped and int(skipped.group(1)) == len(graded_students), f"a second run re-graded hand-ins:\n{again[-2000:]}"


def test_nothing_outside_the_scratch_area_changes(the_class):
    course = the_class.course
    assert tree_digest(course / "source") == the_class.source_before, "a submission changed source/"
    for folder in ("release", "autograded", "feedback"):  # the catalogues beside the masters reach no student
        assert not list((course / folder).rglob("catalogue.py")), f"an assignment's catalogue is in {folder}/"
    for student, digest in the_class.before.items():
        assert tree_digest(course / "submitted" / student) == digest, f"a submission changed {student}'s hand-in"
    assert not Path("/tmp/attention-canary.txt").exists()
    assert (course / "gradebook.db").stat().st_size > 0
    assert not judge_processes(the_class.tmp), "kernel processes outlived grading"
    if os.geteuid() == 0:  # a root grader runs each kernel as a uid of the class's range (harness.LIMITS); uid 0
        uids = the_class.kernel_uids - {0}  # in a scratch folder is the grader's side (a kernel before it drops root)
        assert uids and all(CLASS_UID_BASE <= u < CLASS_UID_BASE + 2**26 for u in uids), sorted(uids)[:5]
    left = sorted(p.name for p in the_class.tmp.iterdir())
    assert not left, f"scratch left behind: {left}"


def test_no_attack_reads_hidden_tests_and_feedback_leaks_nothing(hostile):
    course = hostile(A)["course"]
    secret = {re.sub(r"\s+", " ", l) for l in hidden_lines(A)}
    for attack in (a for a in ATTACKS if a.assignment == A):
        text = re.sub(r"\s+", " ", feedback_text(course, attack.name, A))
        assert adversarial.LEAK not in text, f"{attack.name}: feedback shows what its code printed at autograde"
        assert not [l for l in secret if l in text], f"{attack.name}: feedback shows hidden tests"
        for path in (course / "autograded" / attack.name / A).glob("*.ipynb"):
            # what the attack's code printed while it was graded (the grade cells themselves hold the tests)
            printed = " ".join(str(o.get("text", "")) + json.dumps(o.get("data", {}))
                               for c in read_notebook(path)["cells"] if c["cell_type"] == "code"
                               for o in c.get("outputs", []))
            printed = re.sub(r"\s+", " ", printed.replace("\\n", " "))
            assert not [l for l in secret if l in printed], f"{attack.name} read hidden tests at autograde"


def test_a_renamed_functions_note_carries_no_hidden_input(hostile):
    """The function changes its argument in place on every call and renames itself after the input it was given:
    its feedback still notes the change (no point lost for it), in the course's words alone."""
    course = hostile(A)["course"]
    text = re.sub(r"\s+", " ", feedback_text(course, "echo-hidden-input-renamed", A))
    assert not re.search(r"LEAKED\d", text), f"a note quoted what the kernel said after a hidden call: {text[-3000:]}"
    assert "your function scaled_scores changed" in text, text[-3000:]


def test_faults_are_contained(hostile):
    run = hostile(A)
    course = run["course"]
    flood = course / "autograded" / "output-flood" / A / adversarial.NOTEBOOK
    assert flood.stat().st_size < 10 * 2**20, "100 MB of printed output reached the autograded notebook"
    assert "output truncated by the grader" in flood.read_text(encoding="utf-8")
    for name in ("os-exit", "segfault", "infinite-loop", "unstoppable-loop", "memory-bomb", "fork-bomb"):
        assert name in run["scores"], f"{name} was not graded"


#: The Formgrader's submission page of a hand-in, written as the Formgrader writes it (nbconvert's HTMLExporter with the
#: course's configuration and nbgrader's formgrade template), in the course folder, by a process of its own.
FORMGRADER_PAGE = """
import sys
from nbconvert.exporters import HTMLExporter
from nbgrader.apps.baseapp import NbGrader

student, assignment, notebook = sys.argv[1:4]
app = NbGrader()
app.initialize([])
app.config.HTMLExporter.template_name = "formgrade"
resources = {"assignment_id": assignment, "notebook_id": notebook, "submission_id": "0" * 32, "index": 0, "total": 1,
             "base_url": "/", "student": student, "last_name": "", "first_name": "", "notebook_path": "/"}
html, _ = HTMLExporter(config=app.config).from_filename(f"autograded/{student}/{assignment}/{notebook}.ipynb",
                                                        resources=resources)
sys.stdout.write(html)
"""


def formgrader_page(course: Path, student: str) -> str:
    import subprocess

    proc = subprocess.run([sys.executable, "-c", FORMGRADER_PAGE, student, A, Path(adversarial.NOTEBOOK).stem],
                          cwd=course, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_output_a_kernel_sends_is_capped_and_says_so(hostile):
    """Issue D2 (a 55 KB hand-in made a 251 MB autograded notebook): every byte a kernel sends counts. A 40 MiB error
    (its message and an 8 MiB note in its traceback: about 90 MB a message, twice) is never read: its cell shows an
    error saying so. A 1 MiB exception name, 100 errors in one cell, and displays with huge metadata or transient data
    are cut to the cell's cap. Twelve cells each under the cell's cap stop at the notebook's. Each cut says what was
    cut; the hand-ins score what their wrong answer scores (test_attack_gains_nothing), and the feedback page and the
    Formgrader's page stay within the page's cap, with a note."""
    from attention_course.grading.kernels.kernel_io import MAX_NOTEBOOK_OUTPUT_BYTES, MAX_OUTPUT_BYTES, NOTE
    from attention_course.grading.nbgrader_glue.page_cap import MAX_PAGE_BYTES
    from attention_course.grading.nbgrader_glue.page_cap import NOTE as PAGE_NOTE

    course = hostile(A)["course"]

    def cells(student: str) -> list[tuple[str, list]]:
        path = course / "autograded" / student / A / adversarial.NOTEBOOK
        assert path.stat().st_size <= MAX_NOTEBOOK_OUTPUT_BYTES + 2**20, f"{student}: {path.stat().st_size} bytes"
        found = [("".join(c["source"]).strip(), c["outputs"]) for c in read_notebook(path)["cells"]
                 if c["cell_type"] == "code"]
        for _, outputs in found:
            assert len(json.dumps(outputs)) <= MAX_OUTPUT_BYTES + 8000
        return found

    def text(outputs) -> str:
        return " ".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")

    flood = dict(cells("error-flood"))
    huge, name, many, shown = (flood[s.strip()] for s in (adversarial.HUGE_ERROR, adversarial.LONG_NAME,
                                                          adversarial.MANY_ERRORS, adversarial.BIG_METADATA))
    assert huge[0]["ename"] == "OutputTooLarge" and "not read" in text(huge), huge
    assert name[0]["ename"].startswith("EEE") and len(name[0]["ename"]) <= 200 and name[0]["evalue"].startswith("yyy")
    assert [o for o in many if o["output_type"] == "error"] and "errors" in text(many), text(many)
    assert all(len(json.dumps(o.get("metadata", {}))) < 2**10 for o in shown) and "display" in text(shown), text(shown)
    assert all(NOTE in text(outputs) for outputs in (huge, name, many, shown))
    printed = [outputs for source, outputs in cells("output-across-cells") if source == adversarial.UNDER_THE_CELL_CAP]
    assert len(printed) == 12 and "<" * 1_900_000 in text(printed[0]), "a cell under the cell's cap lost its output"
    assert "which is reached" in text(printed[-1]), text(printed[-1])
    for student in ("error-flood", "output-across-cells"):
        page = (course / "feedback" / student / A / adversarial.NOTEBOOK.replace(".ipynb", ".html")).read_text()
        formgrader = formgrader_page(course, student)
        for html in (page, formgrader):
            assert len(html.encode()) <= MAX_PAGE_BYTES + 2**20, f"{student}: a page of {len(html.encode())} bytes"
    assert PAGE_NOTE in page and PAGE_NOTE in formgrader, "the pages do not say what they cut"


def test_malformed_hand_ins_are_reported_in_the_grade_table(hostile):
    run = hostile(A)
    header, rows = score_table(gradebook_url(run['course']), [A], run["course"])
    problems = {r[0]: r[-1] for r in rows}
    assert "not valid JSON" in problems["corrupt-json"]
    assert "missing" in problems["renamed-notebook"] and "self_attention (1).ipynb" in problems["renamed-notebook"]
    course = run["course"]
    assert (course / "submitted" / "renamed-notebook" / A / "self_attention (1).ipynb").is_file(), "a hand-in was lost"
    assert (course / "submitted" / "corrupt-json" / A / adversarial.NOTEBOOK).is_file(), "a hand-in was lost"


#: What a hand-in's folders may hold after grading: the graded notebooks, the grader's fingerprint and the
#: exchange's validated metadata in autograded/; the pages and that metadata in feedback/.
AUTOGRADED_FILES = {adversarial.NOTEBOOK, ".autograde-fingerprint", "timestamp.txt", "submission_secret.txt"}
FEEDBACK_FILES = {adversarial.NOTEBOOK.replace(".ipynb", ".html"), "timestamp.txt", "submission_secret.txt"}


def test_linked_or_special_notebooks_score_what_the_blank_release_scores(hostile, graded):
    """A notebook handed in as a link (to the master, to a classmate), a hard link to the master or a pipe, and
    a hand-in folder that is a link, score exactly what the untouched release scores and are reported."""
    run = hostile(A)
    blank = auto_cells(graded(A).scores["blank"])
    header, rows = score_table(gradebook_url(run["course"]), [A], run["course"])
    problems = {r[0]: r[-1] for r in rows}
    linked = [a.name for a in ATTACKS if a.finding == "8"] + list(adversarial.LINKED_FOLDERS)
    for name in linked:
        got = auto_cells(run["scores"].get(name, {}))
        assert got == blank, f"{name} scored {got}, the blank release {blank}:\n{run['log'][-3000:]}"
        assert "refused" in problems[name], format_table(header, rows)
        assert re.search(r"link|pipe", problems[name]), problems[name]


def test_nothing_from_outside_a_hand_in_reaches_autograded_or_feedback(hostile):
    """Whatever a hand-in links to (the gradebook, the master, a classmate, /etc/passwd, /dev/zero, a pipe),
    autograded/ holds the graded notebook and feedback/ the page, with nothing copied beside them."""
    run = hostile(A)
    course = run["course"]
    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    for stage, allowed in (("autograded", AUTOGRADED_FILES), ("feedback", FEEDBACK_FILES)):
        for folder in (course / stage).glob(f"*/{A}"):
            assert not folder.is_symlink() and not folder.parent.is_symlink(), f"{folder} is a link"
            names = {p.name for p in folder.iterdir()}
            assert names <= allowed, f"{folder} holds {sorted(names - allowed)}"
            for path in folder.iterdir():
                assert path.is_file() and not path.is_symlink(), path
                assert passwd not in path.read_text(errors="replace"), f"{path} holds /etc/passwd"
    log = run["log"]
    for name in ("gradebook.db", "zero.npy", "pipe.csv", "copy-of-master.txt", "huge.npy"):
        assert f"{name} refused" in log, f"{name} was not reported as refused:\n{log[-3000:]}"


def test_the_sandbox_takes_every_process_and_byte_a_hand_in_leaves(hostile):
    """300 detached, double-forked sleepers and a 3 GiB write into the working folder: both end with the
    kernel (its PID namespace and its size-limited scratch file system), on any host."""
    run = hostile(A)
    flood = read_notebook(run["course"] / "autograded" / "scratch-flood" / A / adversarial.NOTEBOOK)
    printed = " ".join(str(o.get("text", "")) for c in flood["cells"] if c["cell_type"] == "code"
                       for o in c.get("outputs", []))
    stopped = re.search(r"stopped after (\d+) MiB", printed)
    assert stopped and int(stopped.group(1)) <= 512, f"the write was not stopped at the scratch size: {printed[-500:]}"
    assert not judge_processes(run["tmp"]), "kernel processes outlived grading"
    left = survivors(_class_processes)  # the sleepers sleep for an hour: a grace of seconds tells them apart
    assert not left, f"processes of kernel users outlived grading: {left}"


def _class_processes() -> list[str]:
    """Processes running as one of the class's kernel users (other tests may be grading at the same time)."""
    return [p for p in os.listdir("/proc") if p.isdigit() and CLASS_UID_BASE <= _uid(p) < CLASS_UID_BASE + 2**26]


def _uid(pid: str) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1
