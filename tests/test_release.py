"""release/ is what students receive: up to date with source/, and free of solutions and hidden tests."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest
from conftest import SWEEP, catalogue_in_run
from fastvalidate import FAILED, SUCCESS, validate_many
from harness import api_calls, masters, nbgrader, new_course, split_master, trains_a_model

from attention_course.grading.cells import BEGIN_HIDDEN, BEGIN_STARTER, END_HIDDEN, END_STARTER
from attention_course.grading.course import COURSE_ID, ROOT, available, catalogue_path
from tools.submissions import (
    BEGIN_MARK_SCHEME,
    BEGIN_SOLUTION,
    END_MARK_SCHEME,
    END_SOLUTION,
    apply_submission,
    load_catalogue,
    packed,
    read_notebook,
    solved_notebook,
    write_notebook,
)

ASSIGNMENTS = available()
CHECKS = {"assert_close", "check_shape", "check_sums_to_one", "check_unchanged"}  # all return None
MARKERS = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_MARK_SCHEME, END_MARK_SCHEME, BEGIN_HIDDEN, END_HIDDEN, BEGIN_STARTER, END_STARTER)


def test_every_assignment_is_there():
    assert ASSIGNMENTS and ASSIGNMENTS[0] == "01_self_attention"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """A scratch course with every assignment released and its solutions generated (one nbgrader process)."""
    course = new_course(tmp_path_factory.mktemp("release"), ASSIGNMENTS)
    api_calls(course, [(step, [a], {"force": True}) for a in ASSIGNMENTS
                       for step in ("generate_assignment", "generate_solution")])
    return course


def files(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_is_up_to_date(regenerated, assignment):
    committed, fresh = files(ROOT / "release" / assignment), files(regenerated / "release" / assignment)
    # the catalogue beside the master (complete alternative answers among its hand-ins) never reaches students
    assert (regenerated / "source" / assignment / "catalogue.py").is_file()
    for folder in ("release", "solutions"):
        assert not list((regenerated / folder / assignment).rglob("catalogue.py")), f"the catalogue is in {folder}/"
    assert committed.keys() == fresh.keys(), "release/ differs from source/: run `make release` and commit"
    for name, path in committed.items():
        if name.endswith(".ipynb"):
            same = read_notebook(path) == read_notebook(fresh[name])
        else:
            same = path.read_bytes() == fresh[name].read_bytes()
        assert same, f"release/{assignment}/{name} is stale: run `make release` and commit"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_holds_no_solution_and_no_hidden_tests(assignment):
    released = files(ROOT / "release" / assignment)
    for name, master in masters(assignment).items():
        solution, hidden, _ = split_master(master)
        assert solution and hidden, f"{name}: the master has no solution or no hidden test"
        text = released[name].read_text(encoding="utf-8")
        nb = json.loads(text)
        body = "\n".join("".join(c["source"]) for c in nb["cells"])
        for marker in MARKERS:
            assert marker not in body, f"release/{assignment}/{name} contains {marker!r}"
        lines = {l.strip() for l in body.split("\n")}
        leaked = sorted((solution | hidden) & lines)
        assert not leaked, f"release/{assignment}/{name} contains solution or hidden-test lines: {leaked[:3]}"
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
    for name, path in released.items():  # no other file may carry them either
        if not name.endswith(".ipynb"):
            text = path.read_text(encoding="utf-8", errors="replace")
            assert not any(m in text for m in MARKERS), f"release/{assignment}/{name} holds grading material"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_released_test_cells_show_no_result(assignment):
    """A released test cell never ends with a bare value (a docstring left alone once its hidden tests are
    removed would show as Out[n] and make Validate try to read it as a score)."""
    for name, path in files(ROOT / "release" / assignment).items():
        if not name.endswith(".ipynb"):
            continue
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            md = cell["metadata"].get("nbgrader", {})
            if cell["cell_type"] == "code" and md.get("grade") and not md.get("solution"):
                body = ast.parse("".join(cell["source"])).body
                last = body[-1] if body else None
                ends_in_check = isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
                assert not isinstance(last, ast.Expr) or ends_in_check, f"{md['grade_id']} shows a result when run"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_run_and_hold_no_hidden_tests(regenerated, assignment):
    for path in (regenerated / "solutions" / assignment).glob("*.ipynb"):
        nb = read_notebook(path)
        _, hidden, _ = split_master(read_notebook(ROOT / "source" / assignment / path.name))
        body = "\n".join("".join(c["source"]) for c in nb["cells"])
        assert not hidden & {l.strip() for l in body.split("\n")}, f"solutions/{assignment}/{path.name} shows hidden tests"
        assert BEGIN_STARTER not in body and BEGIN_HIDDEN not in body
        errors = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"] if o["output_type"] == "error"]
        assert not errors, f"solutions/{assignment}/{path.name} raised {errors[0]['ename']}: {errors[0]['evalue']}"


GENERIC_ALT = {"", "figure", "plot", "image", "chart", "histogram", "heatmap"}


def test_every_figure_of_the_solutions_says_what_it_shows(regenerated):
    """Every figure the executed solutions show carries a text alternative (attention_course.show) that says what
    it shows with its key numbers: at least a sentence, with digits in it."""
    figures, bare = 0, []
    for path in sorted((regenerated / "solutions").glob("*/*.ipynb")):
        for i, c in enumerate(read_notebook(path)["cells"]):
            for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
                if "image/png" in o.get("data", {}):
                    figures += 1
                    alt = o.get("metadata", {}).get("image/png", {}).get("alt", "")
                    if alt.strip().lower() in GENERIC_ALT or len(alt) < 60 or not re.search(r"\d", alt):
                        bare.append(f"{path.parent.name} cell {i}: {alt!r}")
    assert figures >= 13, f"only {figures} figures in the solutions"
    assert not bare, f"figures without a text alternative that says what they show: {bare}"


def test_solution_pages_meet_wcag_aa(regenerated):
    """`make solutions-html`'s pages pass axe-core (WCAG 2.0/2.1 A and AA) and reflow at 320 CSS px."""
    from browser import chromium, require_axe, wcag_failures

    from attention_course.grading.nbgrader_glue.solutions import write_pages

    require_axe()
    written = write_pages(regenerated, ASSIGNMENTS)
    assert len(written) == len(list((regenerated / "solutions").glob("*/*.ipynb"))) >= len(ASSIGNMENTS)
    assert not [p for p in written if "$$" in p.read_text(encoding="utf-8")], "raw TeX left in a page"
    assert not [p for p in written if "SOLUTION" in p.read_text(encoding="utf-8")], "solution markers in a page"
    assert not [p for p in written if "MARK SCHEME" in p.read_text(encoding="utf-8")], "a mark scheme in a page"
    with chromium() as browser:
        failed = wcag_failures(browser, {p.parent.name: p for p in written})
    assert not failed, "solution pages:\n" + "\n\n".join(f"{k}:\n{v}" for k, v in failed.items())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_masters_are_committed_clean(assignment):
    for path in (ROOT / "source" / assignment).glob("*.ipynb"):
        nb = read_notebook(path)
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name}: saved outputs"
            md = cell["metadata"].get("nbgrader", {})
            if md.get("grade") and cell["cell_type"] == "code":
                first = "".join(cell["source"]).lstrip()
                assert first.startswith('"""'), f"{md['grade_id']}: a grade cell opens with a docstring"
                last = ast.parse(first).body[-1]
                ends_in_check = isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and \
                    getattr(last.value.func, "id", "") in CHECKS
                assert not isinstance(last, ast.Expr) or ends_in_check, (
                    f"{md['grade_id']} ends with an expression: nbgrader would read its value as partial credit")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_validate_tells_students_where_they_stand(regenerated, assignment):
    """Validate (the student's button) passes a solution and fails the blank release."""
    for path in (ROOT / "source" / assignment).glob("*.ipynb"):
        said = validate_many(regenerated, {"solved": solved_notebook(read_notebook(path)),
                                           "blank": read_notebook(regenerated / "release" / assignment / path.name)})
        assert said["solved"] == SUCCESS, said["solved"][-2000:]
        assert said["blank"].startswith(FAILED) and "NotImplementedError" in said["blank"], said["blank"][-2000:]


def test_the_fast_validate_says_what_nbgrader_validate_says(regenerated, tmp_path):
    """The in-process Validate of these tests (tests/fastvalidate.py) and a real `nbgrader validate` agree on the
    blank release (every part failing) and an alternative answer (Success): verdict and failing cells. (A real
    validate is 8 s of CPU; the solution and a headline mistake are validated in process only.)"""
    assignment = ASSIGNMENTS[0]
    (name, master), = masters(assignment).items()
    catalogue = load_catalogue(catalogue_path(assignment))
    mistake = next(s for s in catalogue if s.headline)
    alternative = next(s for s in catalogue if s.is_alternative)
    cases = {"solved": solved_notebook(master), "blank": read_notebook(regenerated / "release" / assignment / name),
             mistake.name: apply_submission(masters(assignment), mistake)[name],
             alternative.name: apply_submission(masters(assignment), alternative)[name]}
    fast = validate_many(regenerated, cases)
    for case in ("blank", alternative.name):
        nb = cases[case]
        path = tmp_path / case / name
        write_notebook(nb, path)
        real = re.sub(r"\x1b\[[0-9;]*m", "", nbgrader(regenerated, "validate", str(path), check=False).stdout)
        if SUCCESS in real:
            assert fast[case] == SUCCESS, f"{case}: nbgrader validate succeeds, the fast one says {fast[case][:500]}"
        else:
            count = re.search(r"VALIDATION FAILED ON (\d+) CELL", real)
            assert count and fast[case].startswith(f"{FAILED} ON {count.group(1)} CELL"), (case, real[-800:], fast[case][:800])
    assert fast["solved"] == SUCCESS and mistake.headline in fast[mistake.name], (fast["solved"][:500], fast[mistake.name][:500])


ALTERNATIVES = [(a, s) for a in ASSIGNMENTS if catalogue_path(a).exists()
                for s in load_catalogue(catalogue_path(a)) if s.is_alternative]


@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if catalogue_path(a).exists()])
def test_validate_agrees_with_autograde_on_correct_answers(regenerated, assignment):
    """Every alternative correct answer of the catalogue (which autograde gives every point) passes
    Validate too, the one whose PyTorch code prints a warning on stderr included."""
    notebooks = {}
    alternatives = [s for a, s in ALTERNATIVES if a == assignment]
    for sub in alternatives if SWEEP else packed(alternatives):  # make test: those changing different cells together
        for name, nb in (sub.transform or (lambda n: n))(apply_submission(masters(assignment), sub)).items():
            notebooks[f"{sub.name}/{name}"] = nb
    wrong = {case: said[-2000:] for case, said in validate_many(regenerated, notebooks).items() if said != SUCCESS}
    assert not wrong, f"Validate fails correct answers: {wrong}"


CATALOGUED = [a for a in ASSIGNMENTS if catalogue_path(a).exists()]


@functools.cache
def mistake_verdicts(course: Path, assignment: str) -> dict[str, str]:
    """What Validate says to each catalogue mistake of an assignment, validated once for the tests below (make test:
    mistakes that change different cells and lose different grade cells in one notebook, each read in its own cells)."""
    from validate_catalogue import verdicts

    return verdicts(course, assignment, catalogue_in_run(assignment), pack=not SWEEP)


@pytest.mark.parametrize("assignment", CATALOGUED)
def test_visible_checks_name_each_parts_headline_mistake(regenerated, assignment):
    """The release's own test cells, with no hidden test (what Validate runs), catch the headline
    misconception of every part (marked ``headline`` in the catalogue) and name it in their message."""
    headlines = [s for s in catalogue_in_run(assignment) if s.headline]  # every one, in make test too
    assert len(headlines) >= 4, f"{assignment}: mark the headline mistake of each part in its catalogue"
    said = mistake_verdicts(regenerated, assignment)
    missed = []
    for sub in headlines:
        out = said[sub.name]
        if FAILED not in out or sub.headline not in out:
            missed.append(f"{sub.name} ({sub.description}): Validate says\n{out[-1500:]}")
    assert not missed, "visible checks miss a headline mistake:\n\n" + "\n\n".join(missed)


@pytest.mark.parametrize("assignment", CATALOGUED)
def test_validate_fails_every_catalogue_mistake(regenerated, assignment):
    """Validate's "Success" means the work is right: every catalogue mistake (``make test``: those of the
    representative part) fails a visible check, except those the catalogue lists with ``unseen_by_validate`` (the
    reason the visible checks cannot see them)."""
    catalogue = {s.name: s for s in catalogue_in_run(assignment)}  # make sweep: every one
    said = mistake_verdicts(regenerated, assignment)
    fooled = sorted(n for n, text in said.items() if text.strip() == SUCCESS and not catalogue[n].unseen_by_validate)
    seen_after_all = sorted(n for n, text in said.items() if text.strip() != SUCCESS and catalogue[n].unseen_by_validate)
    assert not fooled, f"Validate says Success to these mistakes of {assignment}: {fooled}"
    assert not seen_after_all, f"these mistakes are listed as unseen by Validate but fail it: {seen_after_all}"


def late_hidden_helpers(source: str) -> set[str]:
    """Functions a grade cell defines in a hidden block that runs after the cell's first student call.

    If the student's code fails before that block, the helper is never defined."""
    names, seen_code, hidden = set(), False, False
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped.startswith(BEGIN_HIDDEN):
            hidden = True
        elif stripped.startswith(END_HIDDEN):
            hidden = False
        elif hidden:
            match = re.match(r"def (\w+)\(", line)
            if match and seen_code:
                names.add(match.group(1))
        elif stripped and not stripped.startswith(("#", '"""')):
            seen_code = True
    return names


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_grade_cell_depends_on_a_helper_that_student_code_can_skip(assignment):
    """A hidden helper shared between grade cells is defined before any student code runs in its cell."""
    for path in (ROOT / "source" / assignment).glob("*.ipynb"):
        cells = [c for c in read_notebook(path)["cells"] if c["cell_type"] == "code"]
        for cell in cells:
            for name in late_hidden_helpers("".join(cell["source"])):
                users = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in cells
                         if c is not cell and re.search(rf"\b{name}\(", "".join(c["source"]))
                         and not re.search(rf"def {name}\(", "".join(c["source"]))]
                assert not users, (f"{path.name}: {name} is defined after student code in its cell but used by "
                                   f"{users}; define it in a hidden block at the top of the cell")


def test_the_helper_rule_can_fail():
    src = '"""doc"""\nstudent()\n### BEGIN HIDDEN TESTS\ndef ref_(x):\n    return x\n### END HIDDEN TESTS'
    assert late_hidden_helpers(src) == {"ref_"}
    assert late_hidden_helpers(src.replace("student()\n", "")) == set()


def test_solutions_show_full_training(regenerated):
    """Where a master trains a model, the generated solutions run the full training (not the autograde cut)."""
    trained = [a for a in ASSIGNMENTS if trains_a_model(a)]
    if not trained:
        pytest.skip("no assignment trains a model")
    for a in trained:
        text = "".join("".join(o.get("text", "")) for p in (regenerated / "solutions" / a).glob("*.ipynb")
                       for c in read_notebook(p)["cells"] if c["cell_type"] == "code" for o in c["outputs"])
        assert "step 10000" in text, f"solutions/{a} does not show the full training"


# --- Due dates from the release on (issue 59, item 4) ----------------------------------------------------------------

#: generate_assignment and release_assignment (``--force``) through nbgrader's own API (the Formgrader's buttons), each
#: step followed by the assignment as the Formgrader's API (``/formgrader/api/assignments``) lists it, one JSON line
#: each: the step, its log, the listing.
FORMGRADER_STEPS = """
import json, sys
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
app = NbGrader()
app.initialize([])
app.config.ExchangeReleaseAssignment.force = True
api = NbGraderAPI(parent=app)
assignment = sys.argv[1]
for step in sys.argv[2:]:
    result = getattr(api, step)(assignment)
    if not result["success"]:
        sys.exit(f"{step}: {result.get('error', '')}{result.get('log', '')[-3000:]}")
    print(json.dumps({"step": step, "log": result.get("log", ""), "listed": api.get_assignment(assignment)}))
"""


def formgrader_steps(course: Path, assignment: str, *steps: str) -> list[dict]:
    import os
    import subprocess
    import sys

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("NBGRADER_EXCHANGE_ROOT", None)  # the scratch course's own exchange
    proc = subprocess.run([sys.executable, "-c", FORMGRADER_STEPS, assignment, *steps], cwd=course, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def stated(notebook: Path) -> str:
    """The first cell of a released notebook, if it is the one that states the due date ("" otherwise)."""
    first = read_notebook(notebook)["cells"][0]
    return "".join(first["source"]) if "attention_course_due" in first["metadata"] else ""


def test_the_due_date_reaches_the_gradebook_and_the_notebook_at_the_release_and_again_when_it_changes(tmp_path):
    """c.Term.due's date is in the gradebook once the assignment is generated (the Formgrader lists it, in the course's
    time zone) and stated at the top of the released notebook; once the date changes in nbgrader_config.py, releasing
    the old release/ puts the new date into the gradebook and warns that the notebook states the old one; generating
    again states the new one, and releasing it warns no more."""
    a = ASSIGNMENTS[0]
    course = new_course(tmp_path, [a])
    config = course / "nbgrader_config.py"
    as_given = config.read_text()
    config.write_text(as_given + f"\nc.Term.due = {{{a!r}: '2027-01-22 17:00:00 Europe/London'}}\n")
    generated, released = formgrader_steps(course, a, "generate_assignment", "release_assignment")
    assert generated["listed"]["duedate"] == "2027-01-22T17:00:00", generated["listed"]
    assert generated["listed"]["display_duedate"], generated["listed"]
    notebooks = sorted((course / "release" / a).glob("*.ipynb"))
    assert notebooks and all("Due: Friday 22 January 2027, 17:00 (Europe/London)" in stated(nb) for nb in notebooks)
    assert "extension" in stated(notebooks[0]) and "feedback page" in stated(notebooks[0])
    outbound = sorted((course / "exchange" / COURSE_ID / "outbound" / a).glob("*.ipynb"))
    assert [stated(nb) for nb in outbound] == [stated(nb) for nb in notebooks], "the students' copy states it"
    assert "states" not in released["log"], released["log"]
    # every other cell is generate_assignment's own: the due date's cell is the one added
    first = read_notebook(notebooks[0])["cells"]
    assert first[0]["id"] == "due-date" and "nbgrader" not in first[0]["metadata"] and len(first) == 1 + len(
        read_notebook(ROOT / "release" / a / notebooks[0].name)["cells"])

    # the date moves (summer time in London: 16:00 UTC), release/ is released again as it is, then generated
    config.write_text(as_given + f"\nc.Term.due = {{{a!r}: '2027-07-23T17:00:00+01:00'}}\n")
    stale, generated, released = formgrader_steps(course, a, "release_assignment", "generate_assignment",
                                                  "release_assignment")
    assert stale["listed"]["duedate"] == "2027-07-23T16:00:00", stale["listed"]
    assert re.search(r"states the due date Friday 22 January 2027, 17:00 \(UTC\), but c\.Term\.due says Friday 23 "
                     r"July 2027, 17:00 \(UTC\+01:00\): run `make release`", stale["log"]), stale["log"]
    assert generated["listed"]["duedate"] == "2027-07-23T16:00:00"
    assert all("Due: Friday 23 July 2027, 17:00 (UTC+01:00)" in stated(nb) for nb in notebooks)
    assert "states" not in released["log"], released["log"]
    assert all("23 July 2027" in stated(nb) for nb in outbound)
