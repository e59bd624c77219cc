"""Hand grades survive every regrade while the answer is the same (:mod:`attention_course.grading.handgrades`).

A written answer graded by hand keeps its score, comment and ticks through a forced regrade, a test fixed in
``source/`` and a resubmission that leaves it alone; an answer the student changed waits for a grader again, with
its old score, comment and ticks kept as the previous ones. Real ``make autograde`` runs in a scratch course; the
grader's score is set as the Formgrader's API sets it (``Grade.manual_score``, then ``needs_manual_grade``).
"""

from __future__ import annotations

import json

from attention_course.grading import marking
from attention_course.grading.course import available, gradebook_url
from tools.submissions import COMPLETE, read_notebook, write_class, write_notebook

from harness import ONE_WORKER, course_autograde, new_course, release

A = available()[1]  # three written answers


def grade_by_hand(course, student: str, scores: dict, comments: dict, ticks: dict) -> None:
    """As a grader on the question page: a score (the Formgrader's API), a comment, the ticks."""
    from nbgrader.api import Gradebook

    from attention_course.grading import handgrades, nbgrader_ext  # noqa: F401  (the course's gradebook events)

    with Gradebook(gradebook_url(course)) as gb:
        for nb in gb.find_submission(A, student).notebooks:
            for grade in nb.grades:
                if grade.name in scores:
                    grade.manual_score = scores[grade.name]
                    grade.needs_manual_grade = False
            for comment in nb.comments:
                if comment.name in comments:
                    comment.manual_comment = comments[comment.name]
            gb.db.commit()
            for grade in nb.grades:
                if grade.name in ticks:
                    handgrades.row_of_grade(gb.db, grade).ticks = json.dumps(ticks[grade.name])
        gb.db.commit()


def hand_state(course, student: str) -> dict:
    """grade id -> (manual score, waits for a grader, comment, ticks, previous score, previous comment)."""
    from nbgrader.api import Gradebook

    from attention_course.grading import handgrades

    found = {}
    with Gradebook(gradebook_url(course)) as gb:
        for nb in gb.find_submission(A, student).notebooks:
            comments = {c.name: c.manual_comment for c in nb.comments}
            for grade in nb.grades:
                row = handgrades.row_of_grade(gb.db, grade, create=False)
                if row is None:
                    continue
                found[grade.name] = (grade.manual_score, bool(grade.needs_manual_grade), comments.get(grade.name),
                                     handgrades.read_ticks(row.ticks), row.previous_score, row.previous_comment)
    return found


def test_hand_grades_survive_a_forced_regrade_a_test_fix_and_a_resubmission_that_leaves_the_answer(tmp_path):
    questions = marking.questions(new_course(tmp_path / "probe", [A]), A)
    assert len(questions) >= 2, "the test needs two written answers"
    first, second = questions[0], questions[1]
    course = new_course(tmp_path, [A])
    release(course, [A])
    write_class(course, A, {"ann": COMPLETE, "ben": COMPLETE})
    course_autograde(course, *ONE_WORKER)
    marks = {q.grade_id: q.points - 1 for q in questions}
    for student in ("ann", "ben"):
        grade_by_hand(course, student, marks, {q.grade_id: f"{student}: see the scheme's first line" for q in questions},
                      {first.grade_id: [0], second.grade_id: [1]})
    graded = {s: hand_state(course, s) for s in ("ann", "ben")}
    assert all(not waits and score == marks[gid] for s in graded for gid, (score, waits, *_) in graded[s].items())

    # 1. a forced regrade (make autograde FORCE=1): everything kept
    run = course_autograde(course, *ONE_WORKER, "--force")
    assert "Graded 2," in run.stderr, run.stderr[-3000:]
    assert {s: hand_state(course, s) for s in ("ann", "ben")} == graded

    # 2. a test fixed in source/ (the gradebook takes it at the next autograde): every hand-in regraded, kept
    master = next((course / "source" / A).glob("*.ipynb"))
    nb = read_notebook(master)
    test = next(c for c in nb["cells"] if "BEGIN HIDDEN TESTS" in "".join(c["source"]))
    test["source"] = "".join(test["source"]).replace("### END HIDDEN TESTS", "assert True\n### END HIDDEN TESTS")
    write_notebook(nb, master)
    run = course_autograde(course, *ONE_WORKER)
    assert "changed since the gradebook took its tests" in run.stderr and "Graded 2," in run.stderr, run.stderr[-3000:]
    assert {s: hand_state(course, s) for s in ("ann", "ben")} == graded

    # 3. ben hands in again: his first written answer changed (a word added), the second is the same
    handin = next((course / "submitted" / "ben" / A).glob("*.ipynb"))
    nb = read_notebook(handin)
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == first.grade_id)
    cell["source"] = "".join(cell["source"]) + "\n\nAlso: the rows are distributions."
    other = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == second.grade_id)
    other["source"] = "".join(other["source"]).rstrip() + "\n\n"  # blank space only: the same answer
    write_notebook(nb, handin)
    run = course_autograde(course, *ONE_WORKER)
    assert f"{A}/ben (" in run.stderr, run.stderr[-3000:]
    assert hand_state(course, "ann") == graded["ann"]
    ben = hand_state(course, "ben")
    assert ben[first.grade_id] == (None, True, None, [], marks[first.grade_id], graded["ben"][first.grade_id][2])
    assert ben[second.grade_id] == graded["ben"][second.grade_id]
    assert all(ben[q.grade_id] == graded["ben"][q.grade_id] for q in questions[2:])

    # graded again, then regraded: the new grade is kept, its previous one stays beside it until it changes again
    grade_by_hand(course, "ben", {first.grade_id: first.points}, {first.grade_id: "Now complete."},
                  {first.grade_id: [0, 1]})
    course_autograde(course, *ONE_WORKER, "--force")
    assert hand_state(course, "ben")[first.grade_id][:4] == (first.points, False, "Now complete.", [0, 1])
