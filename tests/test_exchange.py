"""nbgrader's exchange out of the box: the whole cycle with real nbgrader commands, two students.

The instructor releases into the course-local exchange (``exchange/``, set in nbgrader_config.py);
each student fetches from their own folder, answers and submits; the instructor collects,
autogrades with the course command, writes and releases feedback; each student fetches it.
"""

from __future__ import annotations

from attention_course.grading.course import available, catalogue_path
from attention_course.grading.submissions import apply_submission, load_catalogue, solved_notebook

from harness import answer_into, as_student, course_autograde, masters, nbgrader, new_course, read_scores

A = available()[0]


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

    nbgrader(course, "collect", A)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["ann", "ben"]
    graded = course_autograde(course, A)
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
