"""Issue 61: the similarity report sees a part copied alone, halves of two authors, a port and a "make it look
different" rewrite, and tells them from convergence (``make check``: no grading run).

On 01, 06 and 07, one class each (tests/similarity_copies.py): the master's solution, two independent authors in
other styles, two honest authors who answer only the short functions the idiomatic way (as the master does), and
one copy per disguise. Each copy must be flagged against every author it takes from, with the part(s) it took named;
no pair of independent authors may be flagged.
"""

from __future__ import annotations

import itertools
import json

import pytest
from similarity_copies import COPIES, INDEPENDENT, PART, build_class

from attention_course.grading.similarity import report as similarity

ASSIGNMENTS = ("01_self_attention", "06_efficient_attention", "07_attention_backward")


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """assignment -> (course, Result, the JSON as written)."""
    out = {}
    for assignment in ASSIGNMENTS:
        course = build_class(tmp_path_factory.mktemp("parts"), assignment)
        result = similarity.write(course, assignment)
        data = json.loads((course / "report" / "similarity" / f"{assignment}.json").read_text(encoding="utf-8"))
        out[assignment] = course, result, data
    return out


def pair(data: dict, a: str, b: str) -> dict:
    return next((p for p in data["pairs"] if set(p["students"]) == {a, b}),
                {"students": [a, b], "score": 0.0, "flagged": False, "whole": 0.0, "parts": []})


def parts_named(p: dict) -> set:
    return {name for x in p["parts"] for name in x.get("of", [x["part"]])}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_function_copied_alone_is_flagged_and_named(classes, assignment):
    p = pair(classes[assignment][2], "copy-part", "own-style")
    assert p["flagged"], f"{assignment}: {PART[assignment]} copied alone scores {p['score']:.2f}: {p}"
    assert p["parts"][0]["part"] == PART[assignment] or PART[assignment] in parts_named(p), p
    assert p["whole"] < similarity.THRESHOLD, f"{assignment}: the whole alone already flags it ({p['whole']:.2f})"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_halves_of_two_authors_are_flagged_against_both(classes, assignment):
    data = classes[assignment][2]
    for source in COPIES["copy-halves"]:
        p = pair(data, "copy-halves", source)
        assert p["flagged"] and p["parts"], f"{assignment}: halves against {source}: {p['score']:.2f}: {p}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_port_to_pytorch_is_flagged(classes, assignment):
    p = pair(classes[assignment][2], "copy-port", "own-style")
    assert p["flagged"] and p["whole"] >= 0.9, f"{assignment}: the port scores {p}"  # seen through, whole


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_long_rewrite_made_to_look_different_is_flagged(classes, assignment):
    p = pair(classes[assignment][2], "copy-rewrite", "own-style")
    assert p["flagged"] and p["whole"] >= 0.95, f"{assignment}: the rewrite scores {p}"  # seen through, whole


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_independent_and_idiomatic_authors_are_not_flagged(classes, assignment):
    data = classes[assignment][2]
    honest = {(a, b): pair(data, a, b) for a, b in itertools.combinations(INDEPENDENT, 2)}
    flagged = {k: (p["score"], [x["part"] for x in p["parts"]]) for k, p in honest.items() if p["flagged"]}
    assert not flagged, f"{assignment}: independent authors flagged: {flagged}"
    best_copy = min(pair(data, c, s)["score"] for c, sources in COPIES.items() for s in sources)
    assert max(p["score"] for p in honest.values()) < best_copy, assignment
    # the two idiomatic authors share every line they wrote, and it is what the master writes: little evidence
    idioms = pair(data, "idiom-a", "idiom-b")
    assert idioms["score"] < similarity.THRESHOLD, idioms


def test_the_page_ranks_by_the_strongest_evidence_and_shows_the_parts(classes):
    course, result, data = classes["06_efficient_attention"]
    page = (course / "report" / "similarity" / "06_efficient_attention.html").read_text(encoding="utf-8")
    scores = [p["score"] for p in data["pairs"]]
    assert scores == sorted(scores, reverse=True)
    rank = [set(q["students"]) for q in data["pairs"] if q["flagged"]].index({"copy-part", "own-style"}) + 1
    section = page[page.index(f'<h2 id="pair-{rank}">'):]
    section = section[:section.index("</section>")]
    assert f"{PART['06_efficient_attention']}" in section and section.count("<mark>") >= 2, section[:2000]
    assert 'class="part"' in section and "the normaliser" in page
    assert "<script" not in page


def test_the_json_of_a_part_is_deterministic(classes, tmp_path):
    import os
    import subprocess
    import sys

    from attention_course.grading.course import ROOT

    course, _, data = classes["01_self_attention"]
    out = tmp_path / "again"
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                    "from attention_course.grading import similarity; "
                    "similarity.write(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))",
                    str(course), "01_self_attention", str(out)], check=True, cwd=ROOT,
                   env=dict(os.environ, PYTHONHASHSEED="7"))
    assert json.loads((out / "01_self_attention.json").read_text(encoding="utf-8")) == data


@pytest.mark.slow
def test_the_page_with_flagged_parts_meets_wcag_aa(classes):
    from browser import chromium, require_axe, wcag_failures

    require_axe()
    pages = {a[:2]: classes[a][0] / "report" / "similarity" / f"{a}.html" for a in ASSIGNMENTS}
    with chromium() as browser:
        failed = wcag_failures(browser, pages)
    assert not failed, failed
