"""Grading that cannot be gamed, leaks nothing, and survives any submission.

One real autograde run of 01_self_attention (the course's parallel command) grades the demo class
together with every hostile submission of tests/catalogue/adversarial.py (a wrong answer plus an
attack each). Then:
- every attack scores, cell by cell, no more than its wrong answer without the attack (the
  catalogue run of test_grading grades those), and exactly as much where it should;
- the demo class's grade table is the same as without the hostile students;
- ``source/`` and the other students' hand-ins are unchanged, no process is left behind;
- neither feedback nor anything the attacks printed shows hidden tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

from attention_course.grading.course import catalogue_path, format_table, gradebook_url, score_table
from attention_course.grading.sandbox import landlock_abi
from attention_course.grading.submissions import (
    BLANK, COMPLETE, demo_roster, load_catalogue, read_notebook, write_class,
)

from harness import course_autograde, feedback_text, nbgrader, new_course, read_scores

sys.path.insert(0, str(Path(__file__).parent / "catalogue"))
import adversarial  # noqa: E402

from test_grading import auto_cells, hidden_lines  # noqa: E402

A = adversarial.ASSIGNMENT
ATTACKS = [a for a in adversarial.ATTACKS if not (a.needs == "signals" and landlock_abi() < 6)]


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def judge_processes() -> set[int]:
    """Processes whose working folder is a kernel scratch folder (there should be none after grading)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if "attention-judge-" in os.readlink(f"/proc/{pid}/cwd"):
                found.add(int(pid))
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    course = new_course(tmp_path_factory.mktemp("hostile"), [A])
    with open(course / "nbgrader_config.py", "a") as f:  # shorter limits keep the faults quick
        f.write("\nc.JudgedExecute.timeout = 8\nc.JudgedExecute.interrupt_grace = 2\n")
    nbgrader(course, "generate_assignment", A, "--force")
    demo = demo_roster(load_catalogue(catalogue_path(A)))
    write_class(course, A, demo)
    before = {s: tree_digest(course / "submitted" / s) for s in demo}
    source_before = tree_digest(course / "source")
    write_class(course, A, {a.name: a.submission() for a in ATTACKS})
    log = course_autograde(course, A, "--force", check=False).stderr
    nbgrader(course, "generate_feedback", A, "--force", check=False)
    return {"course": course, "demo": demo, "before": before, "source_before": source_before, "log": log,
            "scores": read_scores(course, A)}


def test_catalogue_covers_every_class():
    kinds = {a.kind for a in adversarial.ATTACKS}
    assert kinds == {"helpers", "cells", "detect", "read", "fault", "malformed"}
    assert len(adversarial.ATTACKS) >= 20
    assert all(a.base in adversarial.BASE and adversarial.BASE[a.base].is_mistake for a in adversarial.ATTACKS), \
        "every attack is built on a wrong answer"


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_attack_gains_nothing(hostile, graded, attack):
    base = auto_cells(graded(A).scores[attack.base])
    got = auto_cells(hostile["scores"].get(attack.name, {}))
    if not got:  # not graded at all: only acceptable for input nbgrader cannot read (reported in the table)
        assert attack.kind == "malformed", f"{attack.name} was not graded:\n{hostile['log'][-3000:]}"
        return
    assert got.keys() == base.keys(), f"{attack.name}: graded cells {sorted(got)} differ from {sorted(base)}"
    gained = {n: (got[n][0], base[n][0]) for n in base if got[n][0] > base[n][0]}
    assert not gained, f"{attack.description}: scores more than the wrong answer alone in {gained}"
    assert sum(s for s, _ in got.values()) <= sum(s for s, _ in base.values())
    if attack.exact:
        changed = {n: (got[n][0], base[n][0]) for n in base if got[n][0] != base[n][0]}
        assert not changed, f"{attack.description}: cells its attack does not touch changed: {changed}"


def test_demo_table_is_the_same_with_hostile_students(hostile, graded):
    """The demo class's grades equal those of the same answers graded without hostile classmates."""
    catalogue = graded(A).scores
    for student, what in hostile["demo"].items():
        alone = catalogue["complete" if what == COMPLETE else "blank" if what == BLANK else what.name]
        assert hostile["scores"][student] == alone, f"{student}'s grades changed next to hostile students"
    header, rows = score_table(gradebook_url(hostile['course']), [A], hostile["course"])
    table = {r[0]: r for r in rows}
    assert all(not table[s][-1] for s in hostile["demo"]), format_table(header, rows)


def test_nothing_outside_the_scratch_area_changes(hostile):
    course = hostile["course"]
    assert tree_digest(course / "source") == hostile["source_before"], "a submission changed source/"
    for student, digest in hostile["before"].items():
        assert tree_digest(course / "submitted" / student) == digest, f"a submission changed {student}'s hand-in"
    assert not Path("/tmp/attention-canary.txt").exists()
    assert (course / "gradebook.db").stat().st_size > 0
    assert not judge_processes(), "kernel processes outlived grading"
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("attention-judge-*")), "scratch folders left behind"


def test_no_attack_reads_hidden_tests_and_feedback_leaks_nothing(hostile):
    course = hostile["course"]
    secret = {re.sub(r"\s+", " ", l) for l in hidden_lines(A)}
    for attack in ATTACKS:
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


def test_faults_are_contained(hostile):
    course = hostile["course"]
    flood = course / "autograded" / "output-flood" / A / adversarial.NOTEBOOK
    assert flood.stat().st_size < 10 * 2**20, "100 MB of printed output reached the autograded notebook"
    assert "output truncated by the grader" in flood.read_text(encoding="utf-8")
    for name in ("os-exit", "segfault", "infinite-loop", "unstoppable-loop", "memory-bomb", "fork-bomb"):
        assert name in hostile["scores"], f"{name} was not graded"


def test_malformed_hand_ins_are_reported_in_the_grade_table(hostile):
    header, rows = score_table(gradebook_url(hostile['course']), [A], hostile["course"])
    problems = {r[0]: r[-1] for r in rows}
    assert "not valid JSON" in problems["corrupt-json"]
    assert "missing" in problems["renamed-notebook"] and "self_attention (1).ipynb" in problems["renamed-notebook"]
    course = hostile["course"]
    assert (course / "submitted" / "renamed-notebook" / A / "self_attention (1).ipynb").is_file(), "a hand-in was lost"
    assert (course / "submitted" / "corrupt-json" / A / adversarial.NOTEBOOK).is_file(), "a hand-in was lost"
