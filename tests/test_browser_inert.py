"""Student content is inert in every page, tried in Chromium; honest answers keep their formatting.

One hostile hand-in carries the payload corpus (tests/tools/payloads.py) in every place a student controls:
its written answer (Markdown), a raw cell, a Markdown cell's attachments, outputs of every type stored in the
notebook and produced while it is graded, cell and notebook metadata, and a file name. An honest hand-in
writes its answer with maths, a table, a pasted plot, a link and code. Both are autograded by the course
command; then their feedback pages (opened from disk), their Formgrader submission pages and the page that
shows the written question's answers from every hand-in (a real JupyterLab server on loopback) are loaded in
Chromium. No dialog may open and no request may leave for the
payloads' host; no element with an event handler, no script but the page's own, no frame, object, form or
inline SVG, and no ``javascript:`` URL may be in the DOM; the honest answer keeps its formatting
(screenshots in tests/screenshots/). Through the Formgrader's own API, a grade cannot be set above what the
cell allows.
"""

from __future__ import annotations

import base64
import copy
import re
import sys
from pathlib import Path

import pytest
from browser import Lab, chromium, require_chromium
from harness import ONE_WORKER, course_autograde, masters, nbgrader, new_course

from attention_course.grading import trust
from attention_course.grading.course import ROOT, available, gradebook_url
from tools.submissions import solved_notebook, write_notebook

sys.path.insert(0, str(Path(__file__).parent / "tools"))
import payloads  # noqa: E402

require_chromium()

A = available()[0]
NOTEBOOK = "self_attention.ipynb"
STEM = NOTEBOOK[:-6]
SHOTS = ROOT / "tests" / "screenshots"


def _png(width: int = 48, height: int = 24) -> str:
    """A small real PNG (a pasted plot), base64."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (76, 114, 176)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


PNG = _png()
ALL = "\n\n".join(payloads.HTML + payloads.MARKDOWN)
b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731

PRODUCED = f"""
from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display, publish_display_data
display(HTML({ALL!r}))
display(Javascript({payloads.JAVASCRIPT!r}))
display(SVG({payloads.SVG!r}))
display(Markdown({ALL!r}))
display(Latex(r"$\\href{{javascript:alert('latex')}}{{x}}$ <img src=x onerror=alert('latex-html')>"))
publish_display_data({{"image/png": {PNG!r}}}, metadata={{"image/png": {{"width": "1 onerror=alert('width')",
                                                                    "alt": "\\"><img src=x onerror=alert('alt')>"}}}})
publish_display_data({{"image/png": 'x" onerror="alert(\\'png-attr\\')'}})
publish_display_data({{"application/vnd.jupyter.widget-view+json": {{"model_id": "</script><script>alert('widget')</script>"}},
                      "text/html": "<img src=x onerror=alert('widget-html')>"}})
"""
STORED = [
    {"output_type": "display_data", "metadata": {}, "data": {"text/html": ALL, "text/plain": "stored html"}},
    {"output_type": "display_data", "metadata": {}, "data": {"application/javascript": payloads.JAVASCRIPT}},
    {"output_type": "display_data", "metadata": {}, "data": {"image/svg+xml": payloads.SVG}},
    {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": ALL}},
    {"output_type": "display_data", "metadata": {}, "data": {"text/latex": "$<img src=x onerror=alert('tex')>$"}},
    {"output_type": "display_data", "data": {"image/png": PNG},
     "metadata": {"image/png": {"width": "1 onerror=alert('stored-width')", "alt": "\" onerror=\"alert('stored-alt')"},
                  "filenames": {"image/png": "x.html"}}},
    {"output_type": "execute_result", "execution_count": 1, "metadata": {},
     "data": {"text/html": "<script>alert('result')</script>", "text/plain": "result"}},
    {"output_type": "stream", "name": "stdout", "text": "<script>alert('stream')</script>"},
    {"output_type": "error", "ename": "<script>alert('ename')</script>", "evalue": "<img src=x onerror=alert(1)>",
     "traceback": ["<script>alert('traceback')</script>"]},
]
HONEST = """The scores are scaled by $1/\\sqrt{d_k}$ so that their spread does not grow with the width:

$$\\mathrm{softmax}\\left(\\frac{QK^\\top}{\\sqrt{d_k}}\\right)V$$

| query | strongest key | weight |
|---|---|---|
| *the* | **cat** | 0.61 |

1. Each row sums to `1`.
2. See [the paper](https://arxiv.org/abs/1706.03762).

![my plot](attachment:plot.png)

```python
A = softmax(Q @ K.T / np.sqrt(d_k))
```"""


def cell(kind: str, source: str, **extra) -> dict:
    made = {"cell_type": kind, "metadata": extra.pop("metadata", {}), "source": source, **extra}
    if kind == "code":
        made.setdefault("outputs", [])
        made.setdefault("execution_count", None)
    return made


def after_setup(nb: dict, *cells: dict) -> None:
    at = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
    nb["cells"][at + 1:at + 1] = list(cells)


def written(nb: dict, text: str, attachments: dict | None = None) -> None:
    for c in nb["cells"]:
        md = c["metadata"].get("nbgrader", {})
        if c["cell_type"] == "markdown" and md.get("solution"):
            c["source"] = text
            if attachments:
                c["attachments"] = attachments


def hostile_notebook(master: dict) -> dict:
    nb = solved_notebook(master)
    written(nb, ALL + "\n\n![a](attachment:evil.svg) ![b](attachment:evil.html) ![c](attachment:gone.png)",
            {"evil.svg": {"image/svg+xml": b64(payloads.SVG)}, "evil.html": {"text/html": b64(ALL)}})
    after_setup(nb,
                cell("raw", "\n".join(payloads.HTML), metadata={"raw_mimetype": "text/html",
                                                                "tags": ["\"><img src=x onerror=alert('tag')>"]}),
                cell("markdown", "![p](attachment:plot.png) ![s](attachment:evil.svg)",
                     attachments={"plot.png": {"image/png": PNG, "image/svg+xml": b64(payloads.SVG)},
                                  "evil.svg": {"image/svg+xml": b64(payloads.SVG)}}),
                cell("code", PRODUCED),
                cell("code", "print('stored outputs')", outputs=copy.deepcopy(STORED), execution_count=1,
                     metadata={"tags": ["<script>alert('cell-tag')</script>"],
                               "jupyter": {"source_hidden": "<img src=x onerror=alert(1)>"}}))
    nb["metadata"]["title"] = "<script>alert('nb-title')</script>"
    nb["metadata"]["kernelspec"]["display_name"] = "<img src=x onerror=alert('kernel')>"
    return nb


def honest_notebook(master: dict) -> dict:
    nb = solved_notebook(master)
    written(nb, HONEST, {"plot.png": {"image/png": PNG}})
    return nb


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inert")
    course = new_course(tmp, [A])
    nbgrader(course, "generate_assignment", A, "--force")
    master = masters(A)[NOTEBOOK]
    for student, nb in (("honest", honest_notebook(master)), ("hostile", hostile_notebook(master))):
        write_notebook(nb, course / "submitted" / student / A / NOTEBOOK)
    (course / "submitted" / "hostile" / A / "<img src=x onerror=alert('filename')>.txt").write_text("x")
    course_autograde(course, A, "--force", *ONE_WORKER)
    nbgrader(course, "generate_feedback", A, "--force")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        lab = Lab(tmp / "home-instructor", course, "instructor")
        try:
            yield {"course": course, "lab": lab, "browser": browser}
        finally:
            lab.stop()


def submission_id(course: Path, student: str) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(gradebook_url(course)) as gb:
        return gb.find_submission_notebook(STEM, A, student).id


#: Evaluated in each page: active content anywhere in it (the page's own nonce'd scripts aside).
ACTIVE = """() => {
  const found = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (a.name.startsWith('on')) found.push(`${el.tagName} ${a.name}`);
      if (/^\\s*(javascript|vbscript|data:text)/i.test(a.value) && /href|src|action|data/i.test(a.name))
        found.push(`${el.tagName} ${a.name}=${a.value.slice(0, 40)}`);
    }
  }
  for (const el of document.querySelectorAll('script')) if (!el.nonce) found.push('script ' + el.outerHTML.slice(0, 60));
  for (const el of document.querySelectorAll('iframe, frame, object, embed, form, svg, base, meta[http-equiv=refresh]'))
    found.push(el.tagName);
  return found;
}"""


def visit(stage, url: str, name: str, settle_ms: int = 1500) -> tuple[list, list, object]:
    """Load a page, watching for dialogs and for requests to the payloads' host; returns what ran and the page."""
    page = stage["browser"].new_page(viewport={"width": 1280, "height": 900})
    dialogs, remote = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: remote.append(r.url) if "xss.invalid" in r.url or r.url.startswith("javascript")
            else None)
    page.goto(url)
    page.wait_for_load_state("load")
    page.mouse.move(10, 10)
    for y in range(0, 9000, 300):  # hover the page from top to bottom: onmouseover payloads would fire
        page.mouse.wheel(0, 300)
        page.mouse.move(400, 450)
    page.wait_for_timeout(settle_ms)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"inert-{name}.png"))
    return dialogs, remote, page


#: The written question of 01, whose answers (the hostile one's and the honest one's) the question page lists.
WRITTEN = "heatmap_answer"


def pages(stage, student: str) -> list[tuple[str, str]]:
    course, lab = stage["course"], stage["lab"]
    feedback = course / "feedback" / student / A / f"{STEM}.html"
    return [("feedback", feedback.as_uri()),
            ("formgrader", lab.url(f"formgrader/submissions/{submission_id(course, student)}/")),
            ("question", lab.url(f"formgrader/questions/{A}/{STEM}/{WRITTEN}"))]


@pytest.mark.parametrize("where", ["feedback", "formgrader", "question"])
def test_no_payload_runs_in_any_page(stage, where):
    url = dict(pages(stage, "hostile"))[where]
    dialogs, remote, page = visit(stage, url, f"hostile-{where}")
    try:
        assert not dialogs, f"scripts ran in the {where} page: {dialogs}"
        assert not remote, f"the {where} page asked the payloads' host for {remote}"
        active = page.evaluate(ACTIVE)
        assert not active, f"active content in the {where} page: {active[:10]}"
        text = page.inner_text("body")
        if where == "question":  # both answers are there (the hostile one's text, made inert)
            assert page.locator("section.answer .text").count() == 2, "an answer is missing from the question page"
            return
        assert "stored outputs" in text and "not shown" in text, "the hostile cells are not on the page"
        assert not page.query_selector("div#notebook-container.panel-heading"), \
            "a student's element kept the id of one of the page's own"
    finally:
        page.close()


def test_the_pages_carry_a_content_security_policy(stage):
    feedback_url, formgrader_url, question_url = (u for _, u in pages(stage, "hostile"))
    html = Path(feedback_url[len("file://"):]).read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    page = stage["browser"].new_page()
    try:
        response = page.goto(formgrader_url)
        policy = response.headers.get("content-security-policy", "")
        assert re.search(r"script-src 'self' 'nonce-[\w-]+'", policy), policy
        assert "unsafe-inline" not in policy.split("style-src")[0], policy
        page.wait_for_load_state("load")
        # the page's own scripts still work: the grade inputs are filled in by formgrade.js
        page.wait_for_selector("input.score, .score", timeout=30_000)
        policy = page.goto(question_url).headers.get("content-security-policy", "")
        assert re.search(r"script-src 'self' 'nonce-[\w-]+'", policy), policy
    finally:
        page.close()


@pytest.mark.parametrize("where", ["feedback", "formgrader", "question"])
def test_honest_answers_keep_their_formatting(stage, where):
    url = dict(pages(stage, "honest"))[where]
    dialogs, remote, page = visit(stage, url, f"honest-{where}", settle_ms=300)
    try:
        assert not dialogs and not remote
        answer = page.locator("table").filter(has_text="strongest key").first
        answer.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"inert-honest-{where}-answer.png"))
        shown = page.evaluate("""() => ({
            math: [...document.querySelectorAll('math')].filter(m => m.getBoundingClientRect().height > 5).length,
            table: [...document.querySelectorAll('th')].some(t => t.textContent.includes('strongest key')),
            strong: [...document.querySelectorAll('strong')].some(s => s.textContent === 'cat'),
            link: [...document.querySelectorAll('a')].some(a => a.href === 'https://arxiv.org/abs/1706.03762'),
            plot: [...document.querySelectorAll('img')].some(i => i.alt === 'my plot' && i.naturalWidth === 48),
            code: [...document.querySelectorAll('pre')].some(p => p.textContent.includes('softmax(Q @ K.T')),
            item: [...document.querySelectorAll('li')].some(l => l.textContent.includes('Each row sums'))})""")
        assert shown.pop("math") >= 2, "formulas of the answer are not typeset"
        assert all(shown.values()), shown
    finally:
        page.close()


def test_a_grade_cannot_be_set_above_what_the_cell_allows_through_the_api(stage):
    """What a script in the Formgrader's page could do with the instructor's session, tried through the API."""
    course, lab = stage["course"], stage["lab"]
    from nbgrader.api import Gradebook

    with Gradebook(gradebook_url(course)) as gb:
        grades = [(g.id, g.max_score) for g in gb.find_submission_notebook(STEM, A, "hostile").grades]
    page = stage["browser"].new_page()
    try:
        page.goto(lab.url(f"formgrader/submissions/{submission_id(course, 'hostile')}/"))
        page.wait_for_load_state("load")
        replies = page.evaluate("""async ([ids, token]) => {
            const out = [];
            for (const id of ids) {
                const r = await fetch(`${location.origin}/formgrader/api/grade/${id}`, {method: 'PUT',
                    headers: {'Authorization': `token ${token}`, 'Content-Type': 'application/json'},
                    body: JSON.stringify({manual_score: 1000, extra_credit: 10})});
                out.push([r.status, r.ok ? await r.json() : (await r.text()).slice(0, 300)]);
            }
            return out;
        }""", [[gid for gid, _ in grades], lab.token])
    finally:
        page.close()
    limits = dict(grades)
    for status, grade in replies:
        top = limits[grade["id"]]
        assert status == 200 and grade["manual_score"] == top, grade
        assert grade["extra_credit"] == trust.EXTRA_CREDIT_SHARE * top, grade
    with Gradebook(gradebook_url(course)) as gb:
        submission = gb.find_submission(A, "hostile")
        assert submission.score <= (1 + trust.EXTRA_CREDIT_SHARE) * submission.max_score
