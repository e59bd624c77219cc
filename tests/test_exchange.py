"""nbgrader's exchange out of the box: the whole cycle with real nbgrader commands, two students.

The instructor releases into the course-local exchange (``exchange/``, set in nbgrader_config.py);
each student fetches from their own folder, answers and submits; the instructor collects,
autogrades with the course command, writes and releases feedback; each student fetches it. A third
"student" plants a submission of links straight into the shared inbound: collect keeps them links (never
their targets), and autograde refuses them, scores 0 and says why.
"""

from __future__ import annotations

from attention_course.grading.course import available, catalogue_path, gradebook_url, score_table
from tools.submissions import apply_submission, load_catalogue, solved_notebook

from harness import COURSE_ID, answer_into, as_student, course_autograde, masters, nbgrader, new_course, read_scores

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

    nbgrader(course, "collect", A)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["ann", "ben", "eve"]
    collected = course / "submitted" / "eve" / A
    assert (collected / NOTEBOOK).is_symlink() and (collected / "passwd.txt").is_symlink(), \
        "collect copied a link's target instead of the link"
    graded = course_autograde(course, A)
    assert "Graded 3" in graded.stderr, graded.stderr[-3000:]
    assert all(s == 0 for s, _, manual in read_scores(course, A)["eve"].values() if not manual)
    header, rows = score_table(gradebook_url(course), [A], course)
    problems = next(r[-1] for r in rows if r[0] == "eve")
    assert "refused" in problems and "symbolic link" in problems, problems
    assert not [p for p in (course / "autograded" / "eve" / A).iterdir() if p.name not in (NOTEBOOK, "timestamp.txt",
                                                                                          ".autograde-fingerprint")]
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
