"""The grader graded: one real autograde run over a synthetic class (every assignment's catalogue, next to
the hostile hand-ins of test_security.py). ``make test`` grades the representative part of each catalogue
(every alternative, in-place change and headline mistake, and mistakes enough that every grade cell fails for
one: :func:`tools.submissions.representative`), with entries that change different cells and lose different grade
cells sharing a hand-in (:func:`tools.submissions.packed`, as a student with several independent mistakes hands
in); ``make sweep`` grades all of it, each entry alone.

For every assignment with a catalogue (source/<assignment>/catalogue.py):
- the reference solution earns every autograded point and leaves manual cells to the instructor;
- the untouched release earns nothing;
- each mistake loses points in exactly the grade cells it targets, and keeps every other point;
- each alternative correct answer earns every autograded point;
- the first failed check's message names the misconception (``says``), and feedback never shows hidden-test source.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import pytest
from conftest import ATTACKS, GRADED, catalogue_in_run
from harness import masters, read_scores, split_master, trains_a_model

from attention_course.grading.course import catalogue_path, gradebook_url
from attention_course.grading.nbgrader_glue.preprocessors import HIDDEN_PLACEHOLDER, TEMPLATES
from tools.submissions import BLANK, COMPLETE, catalogue_module, load_catalogue, read_notebook, representative

CASES = [(a, s) for a in GRADED for s in catalogue_in_run(a)]  # make sweep: the whole catalogue


def auto_cells(scores: dict) -> dict:
    """The autograded cells of one student: name -> (score, max)."""
    return {name: (s, m) for name, (s, m, manual) in scores.items() if not manual}


def student_scores(graded_class, student):
    scores = graded_class.scores.get(student)
    assert scores is not None, f"{student} was not graded. autograde said:\n{graded_class.autograde_log[-3000:]}"
    return scores


@pytest.mark.parametrize("assignment", GRADED)
def test_solution_earns_every_point(graded, assignment):
    g = graded(assignment)
    scores = student_scores(g, "complete")
    lost = {n: s for n, (s, m) in auto_cells(scores).items() if s != m}
    assert not lost, f"the reference solution loses points in {lost}"
    assert auto_cells(scores), "the assignment has no autograded cell"
    written = {c["metadata"]["nbgrader"]["grade_id"] for nb in masters(assignment).values() for c in nb["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade") and c["metadata"]["nbgrader"].get("solution")}
    waiting = {n for n, (_, _, needs) in scores.items() if needs}
    assert waiting == written, f"cells needing manual grading: {sorted(waiting)}, written answers: {sorted(written)}"
    for name in waiting:
        assert scores[name][0] == 0, f"manual cell {name} was scored before an instructor graded it"


@pytest.mark.parametrize("assignment", GRADED)
def test_untouched_release_earns_nothing(graded, assignment):
    g = graded(assignment)
    earned = {n: s for n, (s, m) in auto_cells(student_scores(g, "blank")).items() if s != 0}
    assert not earned, f"the untouched release earns points in {earned}: these grade cells cannot fail"


def shared_with(g, sub) -> str:
    """For a message: the other entries of the hand-in that carries ``sub`` (make test packs some together)."""
    others = [p.name for p in g.parts(sub.name) if p.name != sub.name]
    return f" (handed in as {g.student(sub.name)}, with {', '.join(others)}; make sweep grades it alone)" if others else ""


@pytest.mark.parametrize("assignment,sub", [c for c in CASES if c[1].is_mistake], ids=lambda x: getattr(x, "name", x))
def test_mistake_loses_points_where_targeted(graded, assignment, sub):
    """In its own hand-in, or in one shared with entries that change other cells and lose other grade cells
    (make test): the mistake's cells are lost, no cell outside the hand-in's entries' cells is, and the first of its
    cells to fail names its misconception."""
    g = graded(assignment)
    student, why = g.student(sub.name), shared_with(g, sub)
    cells = auto_cells(student_scores(g, student))
    unknown = sub.loses - cells.keys()
    assert not unknown, f"catalogue names unknown grade cells {unknown}"
    kept = sorted(n for n in sub.loses if cells[n][0] >= cells[n][1])
    assert not kept, f"{sub.description}: full points in {kept}, which should catch it{why}"
    targeted = frozenset().union(*(p.loses for p in g.parts(sub.name)))
    collateral = sorted(n for n, (s, m) in cells.items() if n not in targeted and s != m)
    assert not collateral, f"{sub.description}: also loses points in {collateral}, which should not be affected{why}"
    # the first message the student meets (of this mistake's cells) names this misconception and no other one
    cell, message = g.first_failure(student, among=sub.loses)
    assert sub.says in message, \
        f"{sub.description}: the first failed check, {cell}, says {message[:600]!r}, not {sub.says!r}{why}"
    assert message.split(": ", 1)[-1][:80] in g.feedback_text(student), f"the feedback does not show {cell}'s message"
    if "common mistake:" in message:  # a named misconception is this one
        named = message.split("common mistake:", 1)[1]
        assert sub.says.removeprefix("common mistake: ") in named, f"{cell} names another mistake: {named[:300]!r}"


@pytest.mark.parametrize("assignment,sub", [c for c in CASES if c[1].is_alternative], ids=lambda x: getattr(x, "name", x))
def test_alternative_answer_earns_every_point(graded, assignment, sub):
    g = graded(assignment)
    lost = {n: (s, m) for n, (s, m) in auto_cells(student_scores(g, g.student(sub.name))).items() if s != m}
    assert not lost, f"{sub.description}: loses points in {lost}{shared_with(g, sub)}"


@pytest.mark.parametrize("assignment,sub", [c for c in CASES if c[1].noted], ids=lambda x: getattr(x, "name", x))
def test_an_argument_changed_in_place_is_noted_and_costs_nothing(graded, assignment, sub):
    """Only the student's own kernel can tell the grader that a function changed its argument: no point rests on
    it (README, "Not defended"). The feedback names the change; Validate, in the student's own kernel, fails on it
    (test_release's headline and Validate tests)."""
    g = graded(assignment)
    lost = {n: (s, m) for n, (s, m) in auto_cells(student_scores(g, g.student(sub.name))).items() if s != m}
    assert not lost, f"{sub.description}: an in-place change cost points in {lost}"
    text = re.sub(r"\s+", " ", g.feedback_text(g.student(sub.name)))
    assert f"Note: {sub.noted}" in text or sub.noted in text and "This costs no points here" in text, text[-2000:]


@pytest.mark.parametrize("assignment", GRADED)
def test_catalogue_is_large_enough(assignment):
    catalogue = load_catalogue(catalogue_path(assignment))
    mistakes = [s for s in catalogue if s.is_mistake]
    alternatives = [s for s in catalogue if s.is_alternative]
    assert len(mistakes) >= 8 and len(alternatives) >= 3, (len(mistakes), len(alternatives))
    # every autograded cell is the target of at least one mistake
    grade_cells = {c["metadata"]["nbgrader"]["grade_id"] for nb in masters(assignment).values() for c in nb["cells"]
                   if c["metadata"].get("nbgrader", {}).get("grade") and c["cell_type"] == "code"}
    untargeted = grade_cells - set().union(*(s.loses for s in mistakes))
    assert not untargeted, f"no mistake in the catalogue targets {sorted(untargeted)}"
    silent = [s.name for s in mistakes if not s.says]
    assert not silent, f"mistakes that do not declare what their first failing message says: {silent}"


@pytest.mark.parametrize("assignment", GRADED)
def test_make_test_grades_every_kind_of_entry_and_fails_every_grade_cell(assignment):
    """What ``make test`` takes of a catalogue (``make sweep`` takes all): every alternative, in-place change and
    headline mistake, every entry a hostile hand-in is built on, and mistakes that together lose every grade cell
    any mistake targets; fewer entries than the whole catalogue where some mistakes repeat a cell."""
    catalogue = load_catalogue(catalogue_path(assignment))
    bases = {a.base for a in ATTACKS if a.assignment == assignment}
    part = {s.name: s for s in representative(catalogue, keep=bases)}
    must = {s.name for s in catalogue if s.is_alternative or s.noted or s.headline} | bases
    assert must <= set(part), f"make test leaves out {sorted(must - set(part))}"
    lost = set().union(*(s.loses for s in part.values()))
    targeted = set().union(*(s.loses for s in catalogue))
    assert lost == targeted, f"no mistake make test grades loses {sorted(targeted - lost)}"
    assert [s.name for s in catalogue if s.name in part] == list(part), "the part keeps the catalogue's order"


def test_the_representative_part_adds_the_mistake_losing_most_cells():
    """The cover is greedy and deterministic: with nothing else chosen, the mistake losing the most uncovered
    cells comes first, the first of equals next."""
    from tools.submissions import Submission

    subs = [Submission("a", "", loses=frozenset({"x"})), Submission("b", "", loses=frozenset({"x", "y"})),
            Submission("c", "", loses=frozenset({"z"})), Submission("d", "", loses=frozenset({"z"})),
            Submission("ok", "")]
    assert [s.name for s in representative(subs)] == ["b", "c", "ok"]
    assert [s.name for s in representative(subs, keep={"a"})] == ["a", "b", "c", "ok"]

def test_packed_hand_ins_share_no_cell_and_keep_what_is_compared_by_name_alone():
    """make test's packing (tools.submissions.packed): a hand-in carries entries of one kind (mistakes, or
    alternatives) that change different solution cells and lose different grade cells, at most PACK_SIZE of them;
    in-place changes, transformed entries and the entries named in ``keep`` stay alone; the edits of every part are
    in the hand-in; and on the real catalogues every entry is in exactly one hand-in."""
    from tools.submissions import PACK_SIZE, Submission, edited_cells, packed

    subs = [Submission("a", "", replace={"f": "x"}, loses=frozenset({"t1"})),
            Submission("b", "", replace={"g": "y"}, loses=frozenset({"t2"})),
            Submission("c", "", replace={"f": "z"}, loses=frozenset({"t3"})),  # f again: another hand-in
            Submission("d", "", edits=[("h", "1", "2")], loses=frozenset({"t1"})),  # t1 again: another hand-in
            Submission("ok", "", replace={"h": "w"}),  # an alternative: never with a mistake
            Submission("ok2", "", replace={"g": "v"}),
            Submission("noted", "", replace={"k": "v"}, noted="changes x in place"),
            Submission("kept", "", replace={"m": "v"}, loses=frozenset({"t9"}))]
    hands = packed(subs, keep={"kept"})
    assert [[p.name for p in h.parts] or [h.name] for h in hands] == [["a", "b"], ["c", "d"], ["ok", "ok2"], ["noted"],
                                                                       ["kept"]]
    assert hands[0].replace == {"f": "x", "g": "y"} and hands[0].loses == {"t1", "t2"} and hands[1].edits == [("h", "1", "2")]
    for assignment in GRADED:
        entries = catalogue_in_run(assignment)
        hands = packed(entries, keep={a.base for a in ATTACKS if a.assignment == assignment})
        assert sorted(p.name for h in hands for p in h.parts or (h,)) == sorted(e.name for e in entries)
        for h in (h for h in hands if h.parts):
            assert 2 <= len(h.parts) <= PACK_SIZE and len({p.is_mistake for p in h.parts}) == 1
            cells = [c for p in h.parts for c in edited_cells(p)]
            lost = [c for p in h.parts for c in p.loses]
            assert len(cells) == len(set(cells)) and len(lost) == len(set(lost)), h.name


@pytest.mark.parametrize("assignment", GRADED)
def test_catalogue_has_a_float32_pytorch_and_a_float64_numpy_answer(assignment):
    """Both numeric styles are graded: each is the reference solution or one of the catalogue's alternatives, which
    test_alternative_answer_earns_every_point grades."""
    precisions = getattr(catalogue_module(catalogue_path(assignment)), "PRECISIONS", {})
    alternatives = {s.name for s in load_catalogue(catalogue_path(assignment)) if s.is_alternative}
    assert set(precisions) == {"float32 PyTorch", "float64 NumPy"}, f"PRECISIONS names {sorted(precisions)}"
    unknown = {style: name for style, name in precisions.items() if name != "reference" and name not in alternatives}
    assert not unknown, f"PRECISIONS names submissions that are not alternatives of the catalogue: {unknown}"


def hidden_lines(assignment: str) -> set[str]:
    """Distinctive lines that occur only in the hidden tests of an assignment's masters."""
    return {l for nb in masters(assignment).values() for l in split_master(nb)[1] if len(l) >= 20}


@pytest.mark.parametrize("assignment", GRADED)
def test_feedback_shows_no_hidden_source(graded, assignment):
    g = graded(assignment)
    secret = hidden_lines(assignment)
    assert secret
    for student in g.students:
        text = re.sub(r"[ \t]+", " ", g.feedback_text(student))
        assert text, f"no feedback for {student}"
        shown = [l for l in secret if re.sub(r"[ \t]+", " ", l) in text]
        assert not shown, f"feedback of {student} shows hidden-test lines: {shown[:3]}"
    # Failed grade cells show the check's message; tracebacks through them (which quote hidden
    # lines) are removed. Students' own cells keep theirs.
    text = g.feedback_text("blank")
    assert "NotImplementedError" in text and HIDDEN_PLACEHOLDER.lstrip("# ") in text
    # a failed check's message (one long line) wraps within the page: the course's CSS is in every page
    css = (Path(TEMPLATES) / "course" / "course.css").read_text(encoding="utf-8").strip()
    for page in (g.course / "feedback" / "blank" / assignment).glob("*.html"):
        assert css in page.read_text(encoding="utf-8"), f"{page.name} lacks the course's CSS"


@pytest.mark.parametrize("assignment", GRADED)
def test_feedback_pages_work_offline_and_say_what_waits_for_a_grader(graded, assignment):
    """Feedback loads nothing from the network: every formula of the master arrives as MathML, no raw TeX
    delimiter is left in a text cell, and a written answer no one has scored says so instead of 0."""
    g = graded(assignment)
    formulas = sum(len(re.findall(r"\$\$.+?\$\$|\$[^$\n]+\$", "".join(c["source"]), re.S))
                   for nb in masters(assignment).values() for c in nb["cells"] if c["cell_type"] == "markdown")
    written = sum(1 for nb in masters(assignment).values() for c in nb["cells"]
                  if c["cell_type"] == "markdown" and c["metadata"].get("nbgrader", {}).get("grade"))
    for student in (COMPLETE, BLANK):
        for page in (g.course / "feedback" / student / assignment).glob("*.html"):
            html = page.read_text(encoding="utf-8")
            assert not re.findall(r"<script[^>]+src=|<link[^>]+href=\"?(https?:)?//", html), \
                f"{page.name} loads from the network"
            markdown = " ".join(re.findall(r'<div class="text_cell_render[^>]*>(.*?)</div>', html, re.S))
            assert "$" not in re.sub(r"<code>.*?</code>|<pre>.*?</pre>", "", markdown, flags=re.S), \
                f"{page.name} leaves raw TeX in a text cell"
            assert html.count("<math") >= formulas
            # an answered question waits for a grader; an unanswered one (left as released) is scored 0
            entries = re.findall(r"Written response</a> \(([^)]*)\)", html)
            assert len(entries) == written, entries
            if student == COMPLETE:
                assert all(e.endswith("points, not graded yet") for e in entries), entries
                assert not written or re.search(r"\d+ answers? worth [\d.]+ points (is|are) not graded yet", html)
            else:
                assert all(e.startswith("Score: 0.0 / ") for e in entries), entries


NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")
#: Parts of a message that hold numbers other than the reference: the student's own error, the tolerances,
#: indices, shapes and counts of wrong entries.
NOT_REFERENCE = re.compile(r"largest absolute error is \S+|rtol=\S+|atol=\S+|off by \S+|\(\d+(?:, \d+)*,?\)"
                           r"|\d+ of \d+ entries|\[[\d, ]*\]")


def failure_messages(course, student, assignment) -> list[str]:
    """The failed checks' messages on a student's feedback pages."""
    import html as html_

    found = []
    for page in (course / "feedback" / student / assignment).glob("*.html"):
        for pre in re.findall(r'<div class="output_subarea output_text output_error">\s*<pre>(.*?)</pre>',
                              page.read_text(encoding="utf-8"), re.S):
            found.append(html_.unescape(re.sub(r"<[^>]+>", "", pre)))
    return found


def significant(token: str) -> int:
    mantissa = token.lstrip("-").split("e")[0]
    digits = mantissa.replace(".", "").lstrip("0")
    return len(digits if "." in mantissa else digits.rstrip("0"))


@functools.cache
def expected_values(log: Path) -> tuple[int, dict]:
    """How many values the checks of the whole class compared against (``checks.EXPECTED_LOG``), and each rounded
    to 3 ... 9 significant digits: read once for every assignment's test."""
    values = [v for line in log.read_text().splitlines() for v in json.loads(line)]
    return len(values), {k: {float(f"{v:.{k}g}") for v in values if math.isfinite(v)} for k in range(3, 10)}


@pytest.mark.parametrize("assignment", GRADED)
def test_feedback_never_prints_a_value_it_was_graded_against(graded, assignment):
    """No failed check's message prints a reference value: every number with 3 or more significant digits in
    a mistake's feedback is compared with every value the checks compared against (recorded while grading)."""
    g = graded(assignment)
    count, rounded = expected_values(g.course / "expected-values.jsonl")
    assert count > 100, "the grader recorded no expected values"
    leaks = {}
    for student in {g.student(sub.name) for sub in g.catalogue if sub.is_mistake}:
        for message in failure_messages(g.course, student, assignment):
            for token in NUMBER.findall(NOT_REFERENCE.sub(" ", message)):
                k = significant(token)
                if 3 <= k <= 9 and float(token) in rounded[k]:
                    leaks.setdefault(student, []).append((token, message[:200]))
    assert not leaks, f"feedback prints values the checks compared against: {leaks}"


@pytest.mark.parametrize("assignment,sub", [c for c in CASES if "warning" in c[1].name],
                         ids=lambda x: getattr(x, "name", x))
def test_warning_on_stderr_does_not_zero_a_correct_answer(graded, assignment, sub):
    """A correct answer that makes PyTorch warn keeps its points: tests are judged outside the kernel,
    so nothing the student's code prints on stderr reaches a graded cell."""
    g = graded(assignment)
    lost = {n: (s, m) for n, (s, m) in auto_cells(student_scores(g, g.student(sub.name))).items() if s != m}
    assert not lost, f"a warning on stderr cost points in {lost}{shared_with(g, sub)}"


TRAINED = [a for a in GRADED if trains_a_model(a)]


@pytest.mark.parametrize("assignment", TRAINED)
def test_autograde_does_not_wait_for_full_training(graded, assignment):
    """Training cells run shortened under autograde; the full run (step 10000) only happens elsewhere."""
    text = printed(graded(assignment), "complete")
    assert "step     0" in text, "the training cells did not run during autograde"
    assert "step 10000" not in text, "autograde ran the full training"


def printed(g, student: str) -> str:
    """What the code cells of a student's autograded notebooks printed."""
    return "".join(o["text"] if isinstance(o["text"], str) else "".join(o["text"])
                   for path in sorted((g.course / "autograded" / student / g.assignment).glob("*.ipynb"))
                   for c in read_notebook(path)["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("assignment", [a for a in GRADED if a == "06_efficient_attention"])
def test_the_memory_figure_says_when_it_cannot_see_pytorch(graded, assignment):
    """06 measures peak memory with tracemalloc, which sees NumPy's arrays but not PyTorch's allocator: an answer
    in PyTorch (PyTorch answers are invited) is told its line measures nothing; a NumPy answer is not."""
    g, warning = graded(assignment), "tracemalloc cannot see PyTorch's memory"
    for entry in ("alt-torch", "alt-torch-float32"):
        assert warning in printed(g, g.student(entry)), f"{entry}'s memory figure does not say it cannot see PyTorch"
    assert warning not in printed(g, "complete")


#: An assignment no hostile hand-in attacks: its gradebook holds the catalogue's students only.
QUIET = [a for a in GRADED if a not in {attack.assignment for attack in ATTACKS}][:1]


@pytest.mark.parametrize("assignment", QUIET)
def test_report_shows_scores_and_pass_rates(graded, assignment, tmp_path):
    """make report's page: a histogram and per-check pass rates that agree with the gradebook."""
    from attention_course.grading.run.report import collect, write_report
    from attention_course.grading.similarity.report import write as write_similarity

    g = graded(assignment)
    db = gradebook_url(g.course)
    write_similarity(g.course, assignment, out=tmp_path / "similarity")
    page = write_report(db, [assignment], tmp_path)
    assert f'<a href="similarity/{assignment}.html">' in page.read_text(), "the report does not link the similarity"
    assert (tmp_path / f"{assignment}_scores.png").stat().st_size > 1000
    assert (tmp_path / f"{assignment}_checks.png").stat().st_size > 1000
    scores, _, checks, _ = collect(db, assignment)
    everyone = read_scores(g.course, assignment)  # the catalogue, and any hostile hand-in of this assignment
    assert len(scores) == len(everyone) >= len(g.students)
    for check in checks:
        full = sum(1 for s in everyone.values() if s[check.name][0] >= s[check.name][1])
        assert (check.passed, check.graded) == (full, len(everyone)), check.name
        assert check.summary and check.name in page.read_text()
    assert [c.rate for c in checks] == sorted(c.rate for c in checks), "checks must be listed lowest pass rate first"
    import statistics  # each figure says what it shows, with the key numbers
    text = page.read_text()
    assert (f'alt="Histogram of the total scores of {assignment}: {len(scores)} students, median '
            f'{statistics.median(scores):g} of ') in text
    assert f"lowest first: {checks[0].name} {100 * checks[0].rate:.0f}%" in text


@pytest.mark.parametrize("assignment", GRADED[:1])
def test_grades_export_for_canvas(graded, assignment, tmp_path):
    """`make grades` also writes grades-canvas.csv in the layout Canvas's gradebook import reads."""
    import csv
    import subprocess
    import sys

    g = graded(assignment)
    out = tmp_path / "canvas.csv"
    table = [sys.executable, "-m", "attention_course.grading", "--course", str(g.course), "table",
             "--csv", str(tmp_path / "grades.csv"), "--canvas", str(out)]
    # written answers wait for grading by hand: the scores are provisional, and the export is refused unless asked
    refused = subprocess.run(table, check=True, capture_output=True, text=True)
    assert "Not saved: canvas.csv" in refused.stdout and "PROVISIONAL=1" in refused.stdout and not out.exists(), \
        refused.stdout[-2000:]
    asked = subprocess.run(table + ["--provisional"], check=True, capture_output=True, text=True)
    assert "provisional scores included" in asked.stdout, asked.stdout[-2000:]
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, points, students = rows[0], rows[1], rows[2:]
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"], header
    assert header[5:] == GRADED and points[0] == "Points Possible"  # every assignment of the class
    column = 5 + GRADED.index(assignment)
    assert float(points[column]) == sum(m for s, m, _ in g.scores["complete"].values())
    by_login = {r[3]: r for r in students}
    assert set(g.students) <= set(by_login)
    for student in g.students:
        total = sum(s for s, _, _ in g.scores[student].values())
        assert abs(float(by_login[student][column]) - total) < 0.01, student


def test_a_page_shows_at_most_its_cap_of_a_hand_in_and_says_where_it_cut():
    """page_cap (issue D2), through nbconvert's HTML exporter as the Formgrader runs it: whatever a hand-in's outputs
    and cells hold (text that escapes to four times its length, ANSI colours, an image, a thousand displays, code and
    Markdown that highlighting multiplies, three thousand cells of its own), the page gives them at most its cap of HTML
    more than a page of the master's cells alone; a note says where the cut begins, every test cell keeps its message
    and an error its name."""
    import base64
    import copy

    from nbconvert import HTMLExporter
    from nbformat import NotebookNode
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from attention_course.grading.nbgrader_glue.page_cap import NOTE
    from attention_course.grading.nbgrader_glue.preprocessors import InertContent

    cap = 2**18

    def test(message):
        return new_code_cell("assert_close(f(X_), expected_)", metadata={"nbgrader": {
            "grade": True, "locked": True, "solution": False, "grade_id": message[:5], "points": 1}},
            outputs=[NotebookNode(output_type="error", ename="AssertionError", evalue=message, traceback=[message])])

    def output(kind, **fields):
        return NotebookNode(output_type=kind, **fields, **({"metadata": {}} if kind == "display_data" else {}))

    png = base64.b64encode(b"\x89PNG" + bytes(2**20)).decode()
    printed = new_code_cell("show()", outputs=[
        output("stream", name="stdout", text="<" * 2**20),
        output("error", ename="Flood" + "E" * 1000, evalue="v" * 10000, traceback=["\x1b[31mx" * 2**17]),
        output("display_data", data={"image/png": png, "text/plain": "figure"}),
        output("display_data", data={"text/plain": "'" * 2**20}),
        *[output("display_data", data={"text/plain": "x"}) for _ in range(1000)]])
    answer = new_code_cell("a.b\n" * 50_000, metadata={"nbgrader": {"solution": True, "grade": False, "locked": False,
                                                                     "grade_id": "answer"}})

    def page(*cells) -> str:
        exporter = HTMLExporter(template_name="classic")
        exporter.register_preprocessor(InertContent(max_page_bytes=cap), enabled=True)
        return exporter.from_notebook_node(new_notebook(cells=copy.deepcopy([test("first check"), *cells,
                                                                            test("last check")])))[0]

    master = len(page().encode())
    for cells in ([printed], [printed, answer, new_markdown_cell("# a\n" * 20_000),
                              *[new_code_cell("") for _ in range(3000)]]):
        html = page(*cells)
        assert len(html.encode()) <= master + cap, f"{len(html.encode()) - master} bytes of HTML over the master's"
        assert "first check" in html and "last check" in html and "FloodEEE" in html
        assert f"{NOTE}: a page shows at most" in html
    assert re.search(r"300\d more cells of the hand-in(&#39;|&#x27;|')s own not shown", html), "no note on the cells left out"
