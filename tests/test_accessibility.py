"""Every page the course writes meets WCAG 2.1 AA: axe-core in Chromium, reflow at 320 CSS px, the keyboard.

Pages: the feedback of the test suite's graded class (for each assignment, the hand-in with the lowest score:
its page holds every kind of cell, passed, failed with a message, and waiting for a grader), the class
report (``make report``) of the same gradebook, and the similarity report of one of its assignments. The
executed solutions (``make solutions-html``) are audited in test_release.py, where they are generated.
axe-core is pinned in tests/axe/package.json and injected into each page (the pages' own policy forbids
scripts, so the audit's browser context bypasses it); its rules are WCAG 2.0 and 2.1, levels A and AA
(``browser.WCAG_AA``). ``make audit`` runs the same audit over every page of the demo class.
"""

from __future__ import annotations

import re

import pytest
from browser import REFLOW, audit, chromium, describe_violations, require_axe

from attention_course.grading.course import ROOT, available, gradebook_url

require_axe()

SHOTS = ROOT / "tests" / "screenshots"


def feedback_pages(the_class) -> dict[str, object]:
    """name -> path: per assignment, the feedback of its catalogue hand-in with the lowest score."""
    chosen = {}
    for assignment in available():
        graded = the_class.graded.get(assignment)
        if graded is None:
            continue
        total = {s: sum(v[0] for v in cells.values()) for s, cells in graded.scores.items()}
        student = min(total, key=lambda s: (total[s], s))
        for page in sorted((the_class.course / "feedback" / student / assignment).glob("*.html")):
            chosen[f"feedback {assignment} {student}"] = page
    return chosen


@pytest.fixture(scope="module")
def site(the_class, tmp_path_factory):
    from attention_course.grading.run.report import write_report
    from attention_course.grading.similarity.report import write as write_similarity

    pages = feedback_pages(the_class)
    out = tmp_path_factory.mktemp("report")
    similar = "02_multihead_attention"  # the test class's hand-ins of it: nearly all copies of the master
    write_similarity(the_class.course, similar, out=out / "similarity")
    pages["report"] = write_report(gradebook_url(the_class.course), available(), out)
    pages["similarity"] = out / "similarity" / f"{similar}.html"
    # the grading service's pages before grading (feedback at submit): one template for every notice
    from attention_course.grading.service.pages import notice_page, when

    pages["notice at submit"] = out / "notice.html"
    pages["notice at submit"].write_text(notice_page("Waiting to be graded", [
        f"You handed this in at {when(0)}. Hand-ins are graded at most once every 10 minutes, and your last one "
        "was graded less than that ago.", f"Next grading at {when(600)}: fetch feedback again after that time."]))
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        yield {"pages": pages, "browser": browser}


def open_page(site, path, **context):
    ctx = site["browser"].new_context(bypass_csp=True, **{"viewport": {"width": 1280, "height": 900}, **context})
    page = ctx.new_page()
    page.goto(path.as_uri())
    return ctx, page


def test_every_page_passes_axe(site):
    """No WCAG 2.0/2.1 A or AA violation on any page, and no text wider than its box at a desktop width."""
    failed = {}
    for name, path in site["pages"].items():
        ctx, page = open_page(site, path)
        try:
            found, wide = audit(page), page.evaluate(REFLOW)
        finally:
            ctx.close()
        if found or wide:
            failed[name] = describe_violations(found) + (f"\ntext wider than its box: {wide}" if wide else "")
    assert len(site["pages"]) >= 7, sorted(site["pages"])
    assert not failed, "WCAG 2.1 AA violations:\n" + "\n\n".join(f"{k}:\n{v}" for k, v in failed.items())


def test_pages_reflow_at_320_css_pixels(site):
    """WCAG 1.4.10: at 320 CSS px wide no text needs scrolling sideways, neither the page nor a box in it."""
    wide = {}
    for name, path in site["pages"].items():
        ctx, page = open_page(site, path, viewport={"width": 320, "height": 640})
        try:
            found = page.evaluate(REFLOW)
        finally:
            ctx.close()
        if found:
            wide[name] = found
    assert not wide, f"text wider than 320 px: {wide}"


#: Every focusable element, in order, and whether focus on it is visible.
FOCUS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  const visible = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
  return {tag: el.tagName, text: (el.textContent || '').trim().slice(0, 40), href: el.getAttribute('href'),
          visible, y: el.getBoundingClientRect().top};
}"""


def test_the_keyboard_reaches_every_link_with_a_visible_focus(site):
    """Tab walks through every link of a feedback page (its table of contents and each cell's way back to the
    top) with a visible focus ring, and Enter on a contents entry brings its cell into view."""
    name, path = next((n, p) for n, p in site["pages"].items() if n.startswith("feedback"))
    ctx, page = open_page(site, path)
    try:
        links = page.evaluate("() => [...document.querySelectorAll('a[href]')].length")
        seen, hidden = [], []
        for _ in range(links + 2):
            page.keyboard.press("Tab")
            now = page.evaluate(FOCUS)
            if now is None:
                continue
            seen.append(now)
            if not now["visible"]:
                hidden.append(now)
        assert len({(s["href"], s["y"]) for s in seen}) >= links, f"Tab reached {len(seen)} of {links} links"
        assert not hidden, f"focus is invisible on {hidden[:3]}"
        page.evaluate("window.scrollTo(0, 0)")
        last = page.locator("#toc a[href]").last
        target = last.get_attribute("href")
        last.focus()
        page.keyboard.press("Enter")
        page.wait_for_function("() => window.scrollY > 0", timeout=5_000)
        assert page.evaluate("location.hash") == target, f"Enter on {target} did not follow it"
    finally:
        ctx.close()


def test_results_are_told_in_words_not_colour_alone(site):
    """Each grade cell of a feedback page says its score in words; the report labels every bar with its rate; the
    similarity page marks matching code with <mark> and an underline, not a colour alone, and says each score."""
    for name, path in site["pages"].items():
        text = path.read_text(encoding="utf-8")
        if name == "report":
            assert "alt=\"Bar chart of the share of students with full points" in text
            continue
        if name == "notice at submit":  # words alone: a heading and sentences, no colour and no grade cell
            assert "<h1>Waiting to be graded</h1>" in text and "color: #1a1a1a" in text
            continue
        if name == "similarity":
            assert "<mark>" in text and "mark{background:#ffd966;color:#1f1f1f;border-bottom:2px solid" in text
            assert re.search(r"<td>\d\.\d\d</td><td>\d+% / \d+%</td>", text) and "is marked by a dashed line" in text
            continue
        ctx, page = open_page(site, path)
        try:
            headings = page.evaluate("""() => [...document.querySelectorAll('.nbgrader_cell .panel-heading')]
                .filter(h => h.querySelector('.pull-right')).map(h => h.innerText)""")
        finally:
            ctx.close()
        assert headings, name
        unlabelled = [h for h in headings if h.startswith("Grade cell") and "Score:" not in h
                      and "not graded yet" not in h]
        assert not unlabelled, f"{name}: {unlabelled[:3]}"


def test_screenshots_at_320_px_and_200_percent_zoom(site):
    """The pictures to look at: a failed hand-in's feedback at 320 CSS px, and at 200% zoom (1280 device px
    shown at 640 CSS px, as a browser zoomed to 200% on a 1280 px window)."""
    name, path = next((n, p) for n, p in reversed(site["pages"].items()) if n.startswith("feedback"))
    for label, options in (("320px", {"viewport": {"width": 320, "height": 640}}),
                           ("zoom200", {"viewport": {"width": 640, "height": 450}, "device_scale_factor": 2})):
        ctx, page = open_page(site, path, **options)
        try:
            shot = SHOTS / f"feedback-{label}.png"
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 5000
            assert not page.evaluate(REFLOW), f"{name} at {label}"
        finally:
            ctx.close()
