"""What students and instructors see, tried in a real browser: the OS's Chromium driven by Playwright.

Two JupyterLab servers run on loopback with a token, as on a course's JupyterHub: the instructor's on a
scratch course, and a student's (``ada``) on her own folder, both pointed at the course's exchange.
The flows run in order and share that state:

1. ada fetches the assignment from the Assignment List;
2. she opens it, runs all (a stub raises ``NotImplementedError``), fills one function by typing, its
   visible checks pass; Validate lists the failing cells; a complete notebook validates with "Success!";
3. she submits from the Assignment List (a second student submits a known mistake from the command line);
4. the instructor collects, autogrades both from Formgrader, scores ada's written answer with a comment:
   the score reaches the gradebook and the regenerated feedback;
5. the feedback page, opened with no network: every failed check's message fits in the page, formulas are
   typeset, no raw ``$$`` is left.

Each step saves a screenshot into ``tests/screenshots/`` (git-ignored). Playwright cannot download its own
browsers here: the tests launch the system's Chromium (tests/browser.py: ``CHROMIUM``, else ``chromium`` on
PATH, else its headless shell).
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
from browser import Lab, chromium, require_chromium
from harness import COURSE_ID, answer_into, as_student, masters, nbgrader, new_course

from attention_course.grading.course import ROOT, available, catalogue_path
from tools.submissions import apply_submission, load_catalogue, solved_notebook

A = available()[0]
NOTEBOOK = "self_attention.ipynb"
STEM = NOTEBOOK[:-6]  # the notebook's name in the gradebook and in feedback/
SHOTS = ROOT / "tests" / "screenshots"
#: A filled-in function, as ada types it.
TYPED = '''def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    """Queries, keys and values: one token per row."""
    Q = X @ W_q + b_q
    K = X @ W_k + b_k
    V = X @ W_v + b_v
    return Q, K, V'''
WRITTEN = "heatmap_answer"  # the written answer of 01 that the instructor scores by hand

require_chromium()

from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The course (released into its exchange), ada's folder, both servers and one browser."""
    tmp = tmp_path_factory.mktemp("browser")
    course = new_course(tmp, [A])
    nbgrader(course, "generate_assignment", A, "--force")
    nbgrader(course, "release_assignment", A, "--force")
    exchange = course / "exchange"
    ada = tmp / "ada"
    ada.mkdir()
    # what a JupyterHub gives each student: the course's id, its exchange, and her own id
    (ada / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.student_id = 'ada'\n")
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):
        old.unlink()
    labs = []
    with chromium(workflow=True) as browser:
        try:
            labs.append(Lab(tmp / "home-ada", ada, "ada"))
            labs.append(Lab(tmp / "home-instructor", course, "instructor"))
            yield dict(course=course, exchange=exchange, ada=ada, student=labs[0], instructor=labs[1],
                       browser=browser, tmp=tmp)
        finally:
            for lab in labs:
                lab.stop()


def page_of(world, width=1440, height=900):
    page = world["browser"].new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    return page


def shot(page, name: str, **kwargs):
    page.screenshot(path=str(SHOTS / f"{name}.png"), **kwargs)


def open_assignment_list(page, lab: Lab):
    page.goto(lab.url("lab"))
    page.get_by_text("Nbgrader", exact=True).click()
    page.get_by_text("Assignment List", exact=True).click()


def idle(page, lab: Lab, timeout=180_000):
    """Wait until the notebook's kernel has finished everything it was asked to run (on a timeout, say what
    the page and the server were doing)."""
    try:
        page.wait_for_function(
            "() => { const e = document.querySelector('.jp-Notebook-ExecutionIndicator');"
            " return e && e.dataset.status === 'idle' }", timeout=timeout)
    except PlaywrightTimeout:
        status = page.evaluate("() => { const e = document.querySelector('.jp-Notebook-ExecutionIndicator');"
                               " return e ? e.dataset.status : 'no indicator' }")
        with urllib.request.urlopen(lab.url("api/kernels"), timeout=10) as r:
            kernels = r.read().decode()
        raise AssertionError(f"the kernel was not idle after {timeout / 1000:.0f} s: page says {status!r}, "
                             f"server says {kernels}\n{lab.log_tail()}") from None


def open_notebook(page, lab: Lab, path: str):
    """Open a notebook and wait for its kernel. On a loaded machine the page has been seen to show a new kernel
    "starting" for over three minutes (once in five runs of make test); a student reloads the page then, and so
    does the test, once."""
    for attempt in (1, 2):
        page.goto(lab.url(f"lab/tree/{path}"))
        page.locator(".jp-Notebook .jp-Cell").first.wait_for()
        try:
            idle(page, lab, timeout=90_000 if attempt == 1 else 180_000)
            return
        except AssertionError as stuck:
            if attempt == 2:
                raise
            print(f"reloading {path}: {str(stuck)[:300]}")


def code_cell(page, text: str):
    return page.locator(".jp-CodeCell").filter(has_text=text)


def validate(page) -> str:
    """Save, press the notebook's Validate button and return the dialog's text (the dialog is closed).

    The save is waited for (the tab loses its unsaved mark) before Validate is pressed; on a loaded machine a
    save still landing can make JupyterLab ask whether the file "changed on disk": the version open here is the
    one to keep, so the test overwrites, as a student would."""
    page.keyboard.press("Control+S")
    expect(page.locator(".jp-mod-current.jp-mod-dirty")).to_have_count(0, timeout=60_000)
    page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    verdict = re.compile(r"Success|failed|error", re.I)
    deadline = time.monotonic() + 300
    while True:
        dialog.wait_for(timeout=300_000)
        text = dialog.inner_text()
        if "changed on disk" in text:
            dialog.get_by_role("button", name="Overwrite").click()
            expect(dialog.filter(has_text="changed on disk")).to_have_count(0, timeout=30_000)
            continue
        if verdict.search(text) or time.monotonic() > deadline:
            break
        page.wait_for_timeout(500)
    expect(dialog).to_contain_text(verdict, timeout=5_000)
    return dialog.inner_text()


def test_1_student_fetches_from_the_assignment_list(world):
    page = page_of(world)
    open_assignment_list(page, world["student"])
    released = page.locator("#released_assignments_list")
    expect(released).to_contain_text(A)
    expect(released).to_contain_text(COURSE_ID)
    shot(page, "1-assignment-list")
    released.get_by_role("button", name="Fetch").click()
    expect(page.locator("#fetched_assignments_list")).to_contain_text(A)
    shot(page, "1-fetched")
    assert (world["ada"] / A / NOTEBOOK).is_file()
    page.close()


def stops_at_the_stub(errors, lab: Lab, lost_before: int, retry: bool, seconds: float = 120) -> bool:
    """Whether run all stopped at the first stub (its NotImplementedError shown) within ``seconds``; False at once
    when ``retry`` and the server's log shows an execute request it could not read since (``lost_before`` of them
    before), where nothing would ever run."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            expect(errors.first).to_contain_text("NotImplementedError", timeout=2_000)  # run all stops at the stub
            return True
        except AssertionError:
            if retry and lab.log_tail(10**7).count("deserialize_binary_message") > lost_before:
                return False
            if time.monotonic() > deadline:
                raise


def test_2_student_runs_fills_one_function_and_validates(world):
    page = page_of(world)
    open_notebook(page, world["student"], f"{A}/{NOTEBOOK}")
    page.locator(".jp-Notebook .jp-Cell").first.click()
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    # Seen on a loaded machine: the Jupyter server could not read the browser's binary websocket frame of an execute
    # request (struct.error in deserialize_binary_message, upstream: a stale websocket handler of the same session), so
    # the setup cell waited as [*] for ever. A student would run all again; so does the test, once, and only for that
    # cause, as soon as the server's log shows it (it waited two minutes before).
    for attempt in (1, 2):
        lost_before = world["student"].log_tail(10**7).count("deserialize_binary_message")
        page.locator(".jp-NotebookPanel-toolbar [data-jp-item-name='restart-and-run']").click()
        page.locator(".jp-Dialog .jp-mod-accept").click()
        if stops_at_the_stub(errors, world["student"], lost_before, retry=attempt == 1):
            break
    idle(page, world["student"])
    errors.first.scroll_into_view_if_needed()
    shot(page, "2-run-all-stops-at-a-stub")

    # ada replaces the stub of project_qkv by typing, then runs it and the cells below it
    stub = code_cell(page, "def project_qkv(")
    stub.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(TYPED)
    checks = [code_cell(page, '"""project_qkv returns Q [L, d_k]'), code_cell(page, '"""project_qkv computes X W + b')]
    for _ in range(12):
        page.keyboard.press("Shift+Enter")
        page.wait_for_timeout(300)
        idle(page, world["student"])
        if all(re.search(r"\[\d+\]", c.locator(".jp-InputPrompt").inner_text()) for c in checks):
            break
    for check in checks:
        assert re.search(r"\[\d+\]", check.locator(".jp-InputPrompt").inner_text()), "a visible check did not run"
        assert check.locator(".jp-OutputArea-output").count() == 0, check.locator(".jp-OutputArea").inner_text()
    checks[1].scroll_into_view_if_needed()
    shot(page, "2-visible-checks-pass")

    # Validate: the notebook still has stubs, so the failing cells are listed
    text = validate(page)
    shot(page, "2-validate-lists-failing-cells")
    assert "The following cell failed" in text and "NotImplementedError" in text
    assert "project_qkv returns Q" not in text, "a visible check of the function ada filled is listed as failing"
    page.locator(".jp-Dialog .jp-mod-accept, .jp-Dialog button").last.click()
    page.close()

    # she completes the notebook (the reference answers go into her cells) and validates again
    answer_into(world["ada"] / A / NOTEBOOK, solved_notebook(masters(A)[NOTEBOOK]))
    page = page_of(world)
    open_notebook(page, world["student"], f"{A}/{NOTEBOOK}")
    text = validate(page)
    shot(page, "2-validate-success")
    assert "Success" in text and "failed" not in text, text
    page.close()


def test_3_student_submits_from_the_assignment_list(world):
    page = page_of(world)
    open_assignment_list(page, world["student"])
    fetched = page.locator("#fetched_assignments_list")
    expect(fetched).to_contain_text(A)
    fetched.get_by_role("button", name="Submit").click()
    expect(page.locator("#submitted_assignments_list")).to_contain_text(A, timeout=60_000)
    shot(page, "3-submitted")
    page.close()
    inbound = world["exchange"] / COURSE_ID / "inbound"
    assert any(p.name.startswith(f"ada+{A}+") for p in inbound.iterdir())
    # a second student hands in a known mistake from the command line
    mistake = next(s for s in load_catalogue(catalogue_path(A)) if s.name == "v-uses-wq")
    home = world["tmp"] / "bruno"
    home.mkdir()
    as_student(home, "bruno", world["exchange"], "fetch_assignment", A)
    answer_into(home / A / NOTEBOOK, apply_submission(masters(A), mistake)[NOTEBOOK])
    as_student(home, "bruno", world["exchange"], "submit", A)


def raw_tex(page) -> list[str]:
    """The text cells of a page that still hold ``$$`` (formulas MathJax would have to typeset)."""
    return page.evaluate("() => [...document.querySelectorAll('.text_cell_render')].map(e => e.textContent)"
                         ".filter(t => t.includes('$$'))")


def modal_says(page, text: str):
    modal = page.locator("#success-modal, #error-modal").last
    modal.wait_for(timeout=600_000)
    expect(modal).to_contain_text(text, timeout=600_000)
    assert page.locator("#error-modal").count() == 0, page.locator("#error-modal").inner_text()
    modal.locator("button").last.click()
    modal.wait_for(state="detached")


def set_extra_credit(course: Path, student: str, points) -> None:
    """The written answer's extra credit, as a grader in the Formgrader's own page sets it."""
    from nbgrader.api import Gradebook

    from attention_course.grading.course import gradebook_url

    with Gradebook(gradebook_url(course), COURSE_ID) as gb:
        gb.find_grade(WRITTEN, STEM, A, student).extra_credit = points
        gb.db.commit()


def gradebook_state(course: Path, student: str) -> dict:
    """What the gradebook holds for a student's notebook: the written answer's manual score and comment,
    the notebook's score and maximum, and the submission's id (Formgrader's URL for it)."""
    from nbgrader.api import Gradebook

    from attention_course.grading.course import gradebook_url

    with Gradebook(gradebook_url(course), COURSE_ID) as gb:
        nb = gb.find_submission_notebook(STEM, A, student)
        return dict(manual=gb.find_grade(WRITTEN, STEM, A, student).manual_score,
                    extra=gb.find_grade(WRITTEN, STEM, A, student).extra_credit,
                    comment=gb.find_comment(WRITTEN, STEM, A, student).manual_comment,
                    score=nb.score, max_score=nb.max_score, id=nb.id)


def test_4_instructor_collects_autogrades_and_scores_in_formgrader(world):
    lab = world["instructor"]
    page = page_of(world)
    page.goto(lab.url("lab"))
    page.get_by_text("Nbgrader", exact=True).click()
    page.get_by_text("Formgrader", exact=True).click()
    expect(page.frame_locator("iframe").first.locator("body")).to_contain_text(A)
    shot(page, "4-formgrader-in-lab")

    page.goto(lab.url("formgrader/manage_assignments"))
    row = page.locator("#main-table tr").filter(has_text=A)
    row.locator("td.collect a").click()
    modal_says(page, "Successfully collected")
    assert sorted(p.name for p in (world["course"] / "submitted").iterdir()) == ["ada", "bruno"]

    page.goto(lab.url(f"formgrader/manage_submissions/{A}"))
    for student in ("ada", "bruno"):
        page.locator("tr").filter(has_text=student).locator("td.autograde a").click()
        modal_says(page, f"Successfully autograded '{A}' for student '{student}'")
    page.reload()
    expect(page.locator("tr").filter(has_text="bruno").locator("td").nth(4)).to_contain_text(re.compile(r"\d"))
    shot(page, "4-autograded")
    ada = gradebook_state(world["course"], "ada")
    points_written = 5.0
    assert ada["score"] == ada["max_score"] - points_written, "ada's complete notebook lost autograded points"

    # the written answer: a score and a comment, typed into Formgrader
    # Manual grading is anonymous ("Submission #n"): the instructor opens ada's from the list by its link
    page.goto(lab.url(f"formgrader/gradebook/{A}/{STEM}"))
    page.locator(f"a[href$='/formgrader/submissions/{ada['id']}']").first.click()
    page.locator(f"input.score#{WRITTEN}").wait_for()
    page.wait_for_load_state("networkidle")  # the grades are loaded after the page: typing earlier is lost
    assert page.locator("math").count() >= 5 and not raw_tex(page), "Formgrader shows formulas as raw TeX"
    for attempt in range(60):
        if attempt % 20 == 0:  # typed again if a busy machine's page had not bound its handlers yet (seen twice)
            if not (attempt and ada["comment"]):
                page.locator(f"textarea#{WRITTEN}-comment").fill("Clear reading of the map: names the strongest pair.")
                page.locator(f"textarea#{WRITTEN}-comment").press("Tab")
            if not (attempt and ada["manual"] == 4):
                page.locator(f"input.score#{WRITTEN}").fill("4")
                page.locator(f"input.score#{WRITTEN}").press("Tab")
                page.locator(f"input.score#{WRITTEN}").scroll_into_view_if_needed()
        ada = gradebook_state(world["course"], "ada")
        if ada["manual"] == 4 and ada["comment"]:
            break
        time.sleep(0.5)
    shot(page, "4-manual-score")
    assert ada["manual"] == 4 and ada["comment"] == "Clear reading of the map: names the strongest pair.", ada
    assert ada["score"] == ada["max_score"] - 1

    page.goto(lab.url("formgrader/manage_assignments"))
    page.locator("#main-table tr").filter(has_text=A).locator("td.generate-feedback a").click()
    modal_says(page, "Successfully generated feedback")
    page.close()
    html = (world["course"] / "feedback" / "ada" / A / f"{STEM}.html").read_text(encoding="utf-8")
    assert "Clear reading of the map: names the strongest pair." in html
    assert "Score: 4.0 / 5.0" in html and "not graded yet" not in html


HOLD_GRADE_ANSWERS = """(() => {
  const fetch0 = window.fetch; let held = [];  // the answers to scores, held until the test lets them go
  window.releaseGradeAnswers = () => { const go = held; held = null; go.forEach((answer) => answer()); };
  window.fetch = function (url, options) {
    const answer = fetch0.apply(this, arguments);
    if (options && options.method === "PUT" && String(url).includes("/api/grade/")) {
      return answer.then((r) => new Promise((resolve) => { if (held) { held.push(() => resolve(r)); } else { resolve(r); } }));
    }
    return answer;
  };
})();"""


def test_4b_instructor_grades_one_question_for_the_whole_class(world):
    """A written question graded across the class: the submission page shows the marking guide under the answer
    and links to the question's page, which lists every hand-in's answer beside the mark scheme; ticks add up a
    score, which reaches the gradebook with the comment; both pages pass axe and reflow at 320 px."""
    from browser import REFLOW, audit, describe_violations

    from attention_course.grading.nbgrader_glue.marking import question

    lab, course = world["instructor"], world["course"]
    scheme = question(ROOT, A, STEM, WRITTEN).lines  # every line that gives points, a part line among them
    bruno = gradebook_state(course, "bruno")
    assert bruno["manual"] is None, "bruno's written answer should still wait for grading"
    page = page_of(world)
    page.goto(lab.url("formgrader"))  # where an instructor starts (and, here, the token's login cookie for "/")
    page.goto(lab.url(f"formgrader/submissions/{bruno['id']}/"))
    expect(page.locator("h4").filter(has_text="Marking guide")).to_have_count(1)
    link = page.locator("a.marking")
    page.wait_for_function("() => { const a = document.querySelector('a.marking');"
                           " return a && a.getAttribute('tabindex') === null }")  # the keyboard reaches it
    link.scroll_into_view_if_needed()
    shot(page, "4b-marking-guide-in-formgrader")
    assert link.get_attribute("href") == f"/formgrader/questions/{A}/{STEM}/{WRITTEN}"
    # The answers to scores are held until both ticks are made, as on a busy hub: a second tick made while the first
    # one's score is on its way must still be saved with its score and ticks (the first answer once undid the newer).
    page.add_init_script(HOLD_GRADE_ANSWERS)
    link.click()
    expect(page.locator("h1")).to_contain_text(WRITTEN)
    expect(page.locator("#progress")).to_have_text("2 answers, 1 still to grade.")
    expect(page.locator("section.answer.pending")).to_have_count(1)
    # bruno's section, found again by its grade's id (it is no longer "pending" once scored)
    grade_id = page.locator("section.answer.pending").get_attribute("data-grade")
    pending = page.locator(f"section.answer[data-grade='{grade_id}']")
    ticks = pending.locator("input.tick-box")
    assert ticks.count() == len(scheme)
    part = next(i for i, (_, _, of) in enumerate(scheme) if of is not None)  # a part of item `whole`
    whole = next(i for i, (_, _, of) in enumerate(scheme) if of is None and i == part - 1)
    set_extra_credit(course, "bruno", 0.5)  # given in the Formgrader after this page was loaded: the ticks keep it
    ticks.nth(0).check()
    ticks.nth(whole).check()
    page.evaluate("releaseGradeAnswers()")
    earned = scheme[0][0] + scheme[whole][0]
    expect(pending.locator(".status")).to_have_text(f"Saved: {earned:g} / 5, with its ticks.")
    ticks.nth(part).check()  # the part instead of its whole: the whole is unticked
    expect(ticks.nth(whole)).not_to_be_checked()
    earned = scheme[0][0] + scheme[part][0]
    expect(pending.locator(".status")).to_have_text(f"Saved: {earned:g} / 5, with its ticks.")
    assert pending.locator("input.score").input_value() == f"{earned:g}"
    pending.locator("textarea").fill("Names both keys; the 10·I and 0 cases are missing.")
    pending.locator("textarea").press("Tab")
    expect(pending.locator(".status")).to_have_text("Comment saved.")
    bruno = gradebook_state(course, "bruno")
    assert bruno["manual"] == earned and bruno["comment"] == "Names both keys; the 10·I and 0 cases are missing."
    assert bruno["extra"] == 0.5, "a save sent back the extra credit the page had when it loaded"
    set_extra_credit(course, "bruno", None)
    page.reload()  # a second grader sees which lines earned the points
    again = page.locator(f"section.answer[data-grade='{grade_id}'] input.tick-box")
    assert [again.nth(i).is_checked() for i in range(len(scheme))] == [i in (0, part) for i in range(len(scheme))]
    shot(page, "4b-question-page")
    page.goto(lab.url("formgrader/questions"))
    row = page.locator("tr").filter(has_text=WRITTEN)
    expect(row.locator("td").nth(3)).to_have_text("0")
    page.close()

    url = lab.url(f"formgrader/questions/{A}/{STEM}/{WRITTEN}")
    for name, address in (("questions", lab.url("formgrader/questions")), ("question", url)):
        for viewport in ({"width": 1280, "height": 900}, {"width": 320, "height": 640}):
            ctx = world["browser"].new_context(bypass_csp=True, viewport=viewport)
            try:
                audited = ctx.new_page()
                audited.goto(address)
                if viewport["width"] > 320:
                    found = audit(audited)
                    assert not found, f"the {name} page: {describe_violations(found)}"
                else:
                    assert not audited.evaluate(REFLOW), f"the {name} page does not reflow at 320 px"
            finally:
                ctx.close()


def test_5_feedback_page_reads_within_the_page_offline(world):
    course = world["course"]
    path = course / "feedback" / "bruno" / A / f"{STEM}.html"
    assert path.is_file(), "no feedback for bruno"
    page = page_of(world)
    remote = []
    page.route("**/*", lambda r: (remote.append(r.request.url), r.abort()) if not r.request.url.startswith("file:")
               else r.continue_())
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    assert not remote, f"the feedback page asked the network for {remote}"
    # every failed check's message stays within the page: its box, and every line inside it
    boxes = page.evaluate("""() => [...document.querySelectorAll('.output_error pre')].map(p => {
        const r = p.getBoundingClientRect(), c = document.querySelector('#notebook-container').getBoundingClientRect();
        return {text: p.textContent, right: r.right, width: r.width, scroll: p.scrollWidth, client: p.clientWidth,
                limit: Math.min(c.right, window.innerWidth)} })""")
    assert boxes, "bruno's feedback shows no failed check"
    for box in boxes:
        assert box["scroll"] <= box["client"] + 1 and box["right"] <= box["limit"] + 1, box
    mistake = next(b for b in boxes if "common mistake" in b["text"])
    page.locator(".output_error pre").filter(has_text="common mistake").first.scroll_into_view_if_needed()
    shot(page, "5-feedback-failed-check")
    # formulas are typeset (MathML with a size), no raw TeX delimiters in text cells
    sizes = page.evaluate("() => [...document.querySelectorAll('math')].map(m => m.getBoundingClientRect().height)")
    assert len(sizes) >= 5 and min(sizes) > 5, sizes
    assert not raw_tex(page), raw_tex(page)[:2]
    page.locator("math[display='block']").first.scroll_into_view_if_needed()
    shot(page, "5-feedback-formulas")
    page.close()
    assert "V is computed with W_q" in mistake["text"]
