"""A regrade reaches the student (:mod:`attention_course.grading.nbgrader_glue.regrade`): after a test is corrected, ``make
autograde`` writes again the page of every hand-in whose score changed and had one, releases it where the student
had a released page, names the change on it, and prints whom it reached. Real runs in a scratch course with its own
exchange; the student's fetch_feedback then sees the new page."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from harness import ONE_WORKER, api_calls, course_autograde, new_course, read_scores, release

from attention_course.grading.course import available
from attention_course.grading.trust.exchange import trusted_timestamp
from tools.submissions import COMPLETE, read_notebook, write_class, write_notebook

A = available()[0]


def test_a_corrected_test_reaches_every_page_it_changes_and_names_the_change(tmp_path):
    course = new_course(tmp_path, [A])
    release(course, [A])
    write_class(course, A, {s: COMPLETE for s in ("ann", "ben", "cat")})
    when = datetime.now(timezone.utc) - timedelta(hours=1)
    for student in ("ann", "ben", "cat"):  # as collect writes them
        folder = course / "submitted" / student / A
        (folder / "timestamp.txt").write_text(trusted_timestamp(when))
        (folder / "submission_secret.txt").write_text(student * 16)
    course_autograde(course, *ONE_WORKER)
    # ann's page was released, ben's written and kept, cat has none
    api_calls(course, [("generate_feedback", [A, "ann"], {}), ("release_feedback", [A, "ann"], {}),
                       ("generate_feedback", [A, "ben"], {})])
    outbound = course / "exchange" / "attention-from-scratch" / "feedback"
    pages = sorted(outbound.glob("*.html"))
    assert len(pages) == 1, pages
    first = pages[0].read_text(encoding="utf-8")
    assert "class=\"regraded\"" not in first
    before = read_scores(course, A)

    # a hidden test corrected in source/: it now fails for everybody
    master = next((course / "source" / A).glob("*.ipynb"))
    nb = read_notebook(master)
    test = next(c for c in nb["cells"] if "BEGIN HIDDEN TESTS" in "".join(c["source"])
                and c["metadata"]["nbgrader"].get("points", 0) > 0)
    cell = test["metadata"]["nbgrader"]["grade_id"]
    test["source"] = "".join(test["source"]).replace("### END HIDDEN TESTS",
                                                     "assert False, 'corrected'\n### END HIDDEN TESTS")
    write_notebook(nb, master)
    run = course_autograde(course, *ONE_WORKER)
    err = run.stderr
    after = read_scores(course, A)
    old, new = (sum(v[0] for v in s["ann"].values()) for s in (before, after))
    lost = before["ann"][cell][0]
    assert lost > 0 and new == old - lost, (old, new, lost)
    assert re.search(rf"released to the student \(1, [^)]*\): {A}/ann\n", err), err[-3000:]
    assert f"not released (no page of theirs was released yet: `nbgrader release_feedback` when ready): {A}/ben" in err
    assert f"{A}/cat" not in err.split("Scores changed")[-1].split("\n", 1)[1], "cat had no page: nothing to write"

    page = pages[0].read_text(encoding="utf-8")
    today = datetime.now(timezone.utc).strftime("%d %b %Y")
    assert f"A test was corrected on {today}: {old:g} -&gt; {new:g} ({cell} {lost:g} -&gt; 0)." in page, \
        re.findall(r'<p class="regraded">.*?</p>', page)
    assert f"Score: {new:g}" in page or f"{new:.1f}" in page
    ben = next((course / "feedback" / "ben" / A).glob("*.html")).read_text(encoding="utf-8")
    assert "A test was corrected on" in ben
    assert not (course / "feedback" / "cat").exists()

    # graded again with nothing changed: no new sentence, nothing released
    again = course_autograde(course, *ONE_WORKER, "--force")
    assert "released to the student" not in again.stderr and "written again" not in again.stderr, again.stderr[-2000:]
    assert pages[0].read_text(encoding="utf-8").count('class="regraded"') == 1
