"""The mark schemes of the written answers and the pieces of the question pages that need no server.

The pages themselves are tried in Chromium on a real JupyterLab server: tests/test_browser.py (grading one
question across the class) and tests/test_browser_inert.py (hostile answers stay inert there).
"""

from __future__ import annotations

import copy

import nbformat
import pytest

from attention_course.grading.course import ROOT, available
from attention_course.grading.nbgrader_glue import marking
from tools.submissions import read_notebook, solved_notebook

ASSIGNMENTS = available()


def test_every_written_answer_has_a_mark_scheme_worth_its_points():
    found = [q for a in ASSIGNMENTS for q in marking.questions(ROOT, a)]
    assert len(found) == 19, [q.grade_id for q in found]
    problems = [p for q in found for p in marking.problems(q)]
    assert not problems, "\n".join(problems)
    assert all(q.prompt and len(q.items) >= 2 for q in found)


def test_a_scheme_is_read_with_its_continuation_lines_and_its_problems_are_named():
    source = ("### BEGIN SOLUTION\nModel.\n### BEGIN MARK SCHEME\n- **2**: first part,\n  continued here.\n"
              "- **0.5**: second.\n### END MARK SCHEME\n### END SOLUTION")
    model, items, partials = marking.split(source)
    assert model == "Model." and items == ((2.0, "first part, continued here."), (0.5, "second.")) and not partials
    q = marking.Question("a", "nb", "answer_x", 3.0, "Why?", model, items)
    assert marking.problems(q) == ["a/nb answer_x: the mark scheme gives 2.5 points, the cell is worth 3"]
    bare = marking.Question("a", "nb", "answer_x", 3.0, "Why?", "Model.", ())
    assert "no mark scheme" in marking.problems(bare)[0]


def test_every_line_that_gives_points_is_a_tick_and_a_part_gives_less_than_its_item():
    source = ("### BEGIN SOLUTION\nModel.\n### BEGIN MARK SCHEME\n- **2**: the reason,\n  continued.\n"
              "  - **1**: the keys without\n    the reason.\n- **1**: the case.\n### END MARK SCHEME\n### END SOLUTION")
    model, items, partials = marking.split(source)
    assert items == ((2.0, "the reason, continued."), (1.0, "the case.")), items
    assert partials == ((0, 1.0, "the keys without the reason."),), partials
    q = marking.Question("a", "nb", "answer_x", 3.0, "Why?", model, items, partials)
    assert q.lines == [(2.0, "the reason, continued.", None), (1.0, "the keys without the reason.", 0),
                       (1.0, "the case.", None)]
    assert marking.problems(q) == []  # a partial line's points are not added to the total
    assert "  - **1**: the keys without the reason." in marking.guide_markdown(q)
    for text in ("the reason. (1 point for the keys alone.)", "the sum; slips lose 1 point.",
                 "the reason (0.5 points for the keys)"):
        inline = marking.Question("a", "nb", "answer_x", 3.0, "Why?", model, ((2.0, text), (1.0, "the case.")))
        assert [p for p in marking.problems(inline) if "inside its text" in p], text
    bigger = marking.Question("a", "nb", "answer_x", 3.0, "Why?", model, items, ((1, 1.0, "all of it"),))
    assert marking.problems(bigger) == [
        "a/nb answer_x: a partial line gives 1 points, its item 1: a part gives less than the whole"]


def test_solved_hand_ins_carry_no_mark_scheme():
    for a in ASSIGNMENTS:
        for path in sorted((ROOT / "source" / a).glob("*.ipynb")):
            text = str(solved_notebook(read_notebook(path)))
            assert "MARK SCHEME" not in text, path


def _submission_page_notebook(assignment: str):
    path = next((ROOT / "source" / assignment).glob("*.ipynb"))
    return nbformat.reads(path.read_text(encoding="utf-8"), as_version=4), path.stem


@pytest.mark.parametrize("with_submission", [True, False])
def test_the_guide_is_added_in_the_formgrader_only(with_submission):
    from traitlets.config import Config

    nb, stem = _submission_page_notebook(ASSIGNMENTS[0])
    before = len(nb.cells)
    config = Config()
    config.CourseDirectory.root = str(ROOT)
    resources = {"assignment_id": ASSIGNMENTS[0], "notebook_id": stem}
    if with_submission:
        resources["submission_id"] = "abc"
    out, _ = marking.ShowMarkScheme(config=config).preprocess(copy.deepcopy(nb), resources)
    guides = [c for c in out.cells if c.source.startswith("#### Marking guide")]
    if not with_submission:  # feedback pages and the like: nothing added
        assert len(out.cells) == before and not guides
        return
    written = marking.questions(ROOT, ASSIGNMENTS[0])
    assert len(guides) == len(written) and len(out.cells) == before + len(written)
    at = out.cells.index(guides[0])
    assert out.cells[at - 1].metadata["nbgrader"]["grade_id"] == written[0].grade_id
    assert "Mark scheme" in guides[0].source and not guides[0].get("metadata", {}).get("nbgrader")


def test_only_the_servers_own_placeholder_becomes_a_link():
    q = marking.questions(ROOT, ASSIGNMENTS[0])[0]
    guide = marking.markdown_html(marking.guide_markdown(q))
    linked = marking.with_question_links(guide, "/user/teach")
    assert f'href="/user/teach/formgrader/questions/{q.assignment}/{q.notebook}/{q.grade_id}"' in linked
    forged = marking.markdown_html(f"`{'0' * 16}:{q.assignment}/{q.notebook}/{q.grade_id}`")
    assert "href" not in marking.with_question_links(forged, "/user/teach")


@pytest.mark.parametrize("text", [
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[l](javascript:alert(1))",
    "<iframe src='https://xss.invalid'></iframe>", "<a href='/formgrader/api/grade/x'>rel</a>",
    "<form action='https://xss.invalid'><input></form>", "<svg onload=alert(1)></svg>"])
def test_a_students_answer_is_inert_html(text):
    shown = marking.answer_html({"cell_type": "markdown", "metadata": {}, "source": f"Answer. {text} $x^2$"})
    for bad in ("<script", "onerror", "javascript:", "<iframe", "<form", "<svg", "onload", 'href="/formgrader'):
        assert bad not in shown, (text, shown)
    assert "<math" in shown and "Answer." in shown


def test_a_blank_answer_says_so():
    blank = {"cell_type": "markdown", "metadata": {}, "source": "YOUR ANSWER HERE"}
    assert "Not answered" in marking.answer_html(blank)
    assert "No answer cell" in marking.answer_html(None)
