"""The similarity report (``python -m attention_course.grading similarity``) on real hand-ins.

For every assignment a scratch class is handed in next to the repository's release: the master's solution, one demo
student's hand-in and a disguised copy of it (every local name renamed, comments dropped, docstrings replaced,
the code printed again from its syntax tree and its functions reordered: ``tools.submissions.disguise``), a
catalogue alternative written in another style, the untouched release twice, and a corrupt notebook.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import SWEEP

from attention_course.grading.cells import cell_source
from attention_course.grading.course import ROOT, available, catalogue_path
from attention_course.grading.similarity import report as similarity
from tools.disguises import KINDS as DISGUISES
from tools.disguises import disguised
from tools.submissions import (
    BLANK,
    COMPLETE,
    apply_submission,
    demo_roster,
    disguise,
    load_catalogue,
    read_notebook,
    solved_notebook,
    write_class,
    write_notebook,
)

#: Per assignment, a catalogue alternative that rewrites most of the answers in another style (NumPy instead of
#: PyTorch, einsum, other designs): written by someone else, it must not be flagged against the master's solution.
OTHER_STYLE = {"01_self_attention": "alt-torch-float32", "02_multihead_attention": "alt-einsum",
               "03_masking": "alt-numpy-float64", "04_msa_attention": "alt-numpy-float64",
               "05_hand_designed_transformers": "alt-designs-rotated", "06_efficient_attention": "alt-torch-float32",
               "07_attention_backward": "alt-torch-float32"}
COPIED, COPY = "ada", "copycat"
PAYLOAD = 'w = "</pre></div><script>alert(1)</script><img src=x onerror=alert(2)>"\n'


def scratch_class(folder: Path, assignment: str) -> Path:
    """A course folder with the repository's release and master of ``assignment`` and the class above."""
    course = folder / assignment
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    catalogue = load_catalogue(catalogue_path(assignment))
    demo = demo_roster(catalogue)[COPIED]
    other = next(s for s in catalogue if s.name == OTHER_STYLE[assignment])
    write_class(course, assignment, {"master": COMPLETE, COPIED: demo, "other-style": other,
                                     "blank": BLANK, "blank-too": BLANK})
    masters = {p.name: read_notebook(p) for p in sorted((course / "source" / assignment).glob("*.ipynb"))}
    original = apply_submission(masters, demo) if demo != COMPLETE else None
    copied = {name: read_notebook(course / "submitted" / COPIED / assignment / name) for name in masters}
    if original is not None:
        assert copied == original
    for name, nb in disguise(copied, seed=len(assignment)).items():
        write_notebook(nb, course / "submitted" / COPY / assignment / name)
    broken, linked, deep = (course / "submitted" / who / assignment for who in ("broken", "linked", "deep"))
    for folder in (broken, linked):
        folder.mkdir(parents=True)
    for name in masters:
        (broken / name).write_text('{"cells": [{"cell_type": "code", "source": "def f(', encoding="utf-8")
        (linked / name).symlink_to("/etc/passwd")  # never followed
        nb = read_notebook(course / "release" / assignment / name)  # code nested past what the parser takes
        nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                            "source": "x = " + "[" * 5000 + "]" * 5000 + "\ny = " + "-" * 20000 + "1"})
        write_notebook(nb, deep / name)
    return course


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """assignment -> (course, Result, JSON as read back), for every assignment."""
    out = {}
    for assignment in available():
        course = scratch_class(tmp_path_factory.mktemp("similarity"), assignment)
        result = similarity.write(course, assignment)
        data = json.loads((course / "report" / "similarity" / f"{assignment}.json").read_text(encoding="utf-8"))
        out[assignment] = (course, result, data)
    return out


def pair(data: dict, a: str, b: str) -> dict | None:
    return next((p for p in data["pairs"] if set(p["students"]) == {a, b}), None)


def test_the_json_interface_is_exactly_as_documented(reports, opaque_class):
    hidden = opaque_class[2]
    for assignment, (_, _, data) in [*reports.items(), ("01_self_attention (opaque)", opaque_class)]:
        assert set(data) == {"pairs", "threshold", "opaque"} and data["threshold"] == similarity.THRESHOLD
        scores = [p["score"] for p in data["pairs"]]
        assert scores == sorted(scores, reverse=True), f"{assignment}: pairs not best first"
        for p in data["pairs"]:
            assert set(p) == {"students", "score", "flagged", "shares", "matched_tokens", "whole", "parts"}, p
            assert p["score"] == max([p["whole"], *(x["score"] for x in p["parts"])]), p
            assert len(p["students"]) == 2 and p["students"][0] != p["students"][1]
            assert 0 <= p["score"] <= 1 and p["flagged"] == (p["score"] >= data["threshold"]), p
            assert len(p["shares"]) == 2 and all(0 <= x <= 1 for x in p["shares"]) and p["matched_tokens"] >= 0
        for o in data["opaque"]:
            assert set(o) == {"student", "file", "cell", "cell_id", "constructs"}, o
            assert isinstance(o["cell"], int) or (o["cell"] is None and o["cell_id"] is None), o
            assert o["constructs"] == sorted(set(o["constructs"])) and o["constructs"], o
        places = [(o["student"], o["file"], -1 if o["cell"] is None else o["cell"]) for o in data["opaque"]]
        assert places == sorted(set(places)), f"{assignment}: opaque entries not one per cell, in order"
    assert hidden["opaque"] and not any(data["opaque"] for _, _, data in reports.values())


@pytest.mark.parametrize("assignment", available())
def test_a_disguised_copy_ranks_first_and_is_flagged(reports, assignment):
    _, result, data = reports[assignment]
    copy = pair(data, COPIED, COPY)
    assert copy is not None and copy["flagged"], f"{assignment}: the disguised copy was not flagged: {copy}"
    assert copy["score"] == data["pairs"][0]["score"] >= 0.95, (copy, data["pairs"][:3])
    # a tie at the top is only with the master, of which the demo student's hand-in is itself a copy
    assert all(p["score"] < copy["score"] or set(p["students"]) <= {COPIED, COPY, "master"} for p in data["pairs"])


@pytest.mark.parametrize("assignment", available())
def test_independent_work_and_the_release_are_not_flagged(reports, assignment):
    _, result, data = reports[assignment]
    other = pair(data, "master", "other-style")
    assert other is None or not other["flagged"], f"{assignment}: another style flagged against the master: {other}"
    assert not [p for p in data["pairs"] if "other-style" in p["students"] and p["flagged"]]
    # the untouched release has no code of its own (its starter code and locked cells are left out)
    assert not [p for p in data["pairs"] if {"blank", "blank-too"} & set(p["students"]) and p["score"] > 0]
    assert result.texts["blank"] == result.texts["blank-too"] == ""
    assert data["opaque"] == [], f"{assignment}: honest hand-ins named opaque: {data['opaque']}"


def test_a_corrupt_notebook_is_reported_and_the_rest_compared(reports):
    """A notebook that is not JSON, one that is a link, and code nested past what Python's parser takes."""
    for assignment, (course, result, data) in reports.items():
        assert "not a readable notebook" in result.skipped.get("broken", ""), result.skipped
        assert "symbolic link" in result.skipped.get("linked", ""), result.skipped
        assert "deep" in result.students and "broken" not in result.students and len(result.students) == 7
        assert not result.notes
        page = (course / "report" / "similarity" / f"{assignment}.html").read_text(encoding="utf-8")
        assert "Not compared" in page and "broken" in page


def test_a_flood_of_hostile_code_is_compared_in_part_and_shown_inert(tmp_path):
    course = tmp_path / "flood"
    assignment = "01_self_attention"
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    for name in ("flood", "flood-too"):
        for path in (course / "release" / assignment).glob("*.ipynb"):
            nb = read_notebook(path)
            nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                "source": PAYLOAD + "\n".join(f"w = w * {i} + b" for i in range(8000))})
            write_notebook(nb, course / "submitted" / name / assignment / path.name)
    result = similarity.write(course, assignment)
    assert set(result.notes) == {"flood", "flood-too"} and "only the first 60,000 of its" in result.notes["flood"]
    assert len(result.texts["flood"]) == similarity.MAX_CODE and result.pairs[0]["flagged"]
    page = (course / "report" / "similarity" / f"{assignment}.html").read_text(encoding="utf-8")
    assert "Compared in part" in page and "default-src 'none'" in page
    assert "&lt;script&gt;" in page and not active_markup(page)


def active_markup(page: str) -> list:
    """Elements of the page that could run something: scripts, event handlers, images from elsewhere."""
    from html.parser import HTMLParser

    found = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag in ("script", "iframe", "object", "embed") or any(k.startswith("on") for k, _ in attrs) \
                    or (tag == "img" and not dict(attrs).get("src", "").endswith(".png")):
                found.append((tag, attrs))

    Parser().feed(page)
    return found


# ---- code the report cannot read ----------------------------------------------------------------------------------

class _Runs:
    """Unpickled, runs its code (what a pickle of an answer looks like)."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


def hidden_forms(source: str) -> dict[str, tuple[str, str]]:
    """Ways to hand in an answer cell's code where no parser reads it, each of which runs it in the student's kernel:
    kind -> (the cell's new source, a construct the report must name)."""
    import base64
    import marshal
    import pickle
    import zlib

    hexed = f'bytes.fromhex("{source.encode().hex()}").decode()'
    packed = f'zlib.decompress(base64.b64decode("{base64.b64encode(zlib.compress(source.encode())).decode()}")).decode()'
    code = f'marshal.loads(bytes.fromhex("{marshal.dumps(compile(source, "<answer>", "exec")).hex()}"))'
    fields = ", ".join(f"c.co_{f}" for f in ("argcount", "posonlyargcount", "kwonlyargcount", "nlocals", "stacksize",
                                                "flags", "code", "consts", "names", "varnames", "filename", "name",
                                                "qualname", "firstlineno", "linetable", "exceptiontable"))
    return {
        "hex": (f"exec({hexed})", "exec(<computed>)"),
        "eval": (f'eval("ex" + "ec")({hexed})', "eval(<computed>)"),
        "compile": (f'import base64, zlib\nanswer = compile({packed}, "<answer>", "exec")\nexec(answer)',
                    "compile(<computed>)"),
        "dunder-import": (f'__import__("built" + "ins").exec({hexed})', "__import__(<computed>)"),
        "importlib": (f'import importlib\nimportlib.import_module("bui" + "ltins").exec({hexed})',
                      "importlib.import_module(<computed>)"),
        "marshal": (f"import marshal\nexec({code})", "marshal.loads(...)"),
        "pickle": (f'import pickle\npickle.loads(bytes.fromhex("{pickle.dumps(_Runs(source)).hex()}"))',
                   "pickle.loads(...)"),
        "function-type": (f"import marshal, types\ntypes.FunctionType({code}, globals())()", "types.FunctionType(...)"),
        "code-type": (f"import marshal, types\nc = {code}\ntypes.FunctionType(types.CodeType({fields}), globals())()",
                      "types.CodeType(...)"),
        "getattr": (f'import base64, builtins, zlib\ngetattr(builtins, "ex" + "ec")({packed})',
                    "getattr(builtins, <computed>)"),
        "payload": (f"import base64, zlib\npayload = {packed}\nexec(payload)", "exec(<computed>)"),
        "globals": (f'globals()["__built" + "ins__"].exec({hexed})', "globals()[<computed>]"),
        "dunder-builtins": (f'getattr(__builtins__, "".join(map(chr, (101, 120, 101, 99))))({hexed})',
                            "getattr(builtins, <computed>)"),
        "written-module": (f'import base64, zlib\nwith open("answer_" + "impl.py", "w") as f:\n    f.write({packed})\n'
                           "from answer_impl import *", "import answer_impl: neither handed in nor installed"),
        "run-cell": (f"get_ipython().run_cell({hexed})", "get_ipython().run_cell(<computed>)"),
    }


@pytest.fixture(scope="module")
def opaque_class(tmp_path_factory):
    """A class of 01: the master, the demo student, a catalogue alternative, the release, and one hand-in per way of
    :func:`hidden_forms` (the master's solution with its first answer cell hidden that way), and one handing in
    compiled code and a module in another source encoding. (course, Result, JSON as read back); the Result's
    ``hidden`` maps each hidden hand-in to (notebook, cell index, cell id, the construct to name)."""
    assignment = "01_self_attention"
    course = tmp_path_factory.mktemp("opaque") / assignment
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    catalogue = load_catalogue(catalogue_path(assignment))
    other = next(s for s in catalogue if s.name == OTHER_STYLE[assignment])
    write_class(course, assignment, {"master": COMPLETE, COPIED: demo_roster(catalogue)[COPIED], "other-style": other,
                                     "blank": BLANK})
    (name,) = [p.name for p in (course / "submitted" / "master" / assignment).glob("*.ipynb")]
    master = read_notebook(course / "submitted" / "master" / assignment / name)
    index = next(i for i, c in enumerate(master["cells"]) if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell = master["cells"][index]
    hidden = {}
    for kind, (source, construct) in hidden_forms("".join(cell["source"])).items():
        nb = json.loads(json.dumps(master))
        nb["cells"][index]["source"] = source
        write_notebook(nb, course / "submitted" / f"hidden-{kind}" / assignment / name)
        hidden[f"hidden-{kind}"] = (name, index, cell.get("id"), construct)
    files = course / "submitted" / "hidden-files" / assignment
    write_notebook(master, files / name)
    (files / "impl.pyc").write_bytes(b"\xa7\r\r\n" + bytes(12))
    (files / "helper.py").write_text("# -*- coding: utf-7 -*-\nx = 1 +AAo-y = 2\n", encoding="utf-8")
    result = similarity.write(course, assignment)
    result.hidden = hidden
    data = json.loads((course / "report" / "similarity" / f"{assignment}.json").read_text(encoding="utf-8"))
    return course, result, data


def test_code_it_cannot_read_is_named_opaque_with_its_cell(opaque_class):
    """Every hand-in that runs computed code is named opaque, with the notebook, the cell and what it saw, in the
    JSON, on the page and in the summary; no honest hand-in of the class is."""
    course, result, data = opaque_class
    opaque = {}
    for o in data["opaque"]:
        opaque.setdefault(o["student"], []).append(o)
    for student, (name, index, cell_id, construct) in result.hidden.items():
        entries = opaque.get(student, [])
        assert [(o["file"], o["cell"], o["cell_id"]) for o in entries] == [(name, index, cell_id)], (student, entries)
        assert construct in entries[0]["constructs"], (student, entries)
    files = {o["file"]: o["constructs"] for o in opaque["hidden-files"]}
    assert files == {"helper.py": ["a .py file in the utf-7 source encoding"], "impl.pyc": ["compiled code handed in"]}
    assert set(opaque) == {*result.hidden, "hidden-files"}, "an honest hand-in was named opaque"
    page = (course / "report" / "similarity" / "01_self_attention.html").read_text(encoding="utf-8")
    section = page[page.index('<h2 id="opaque">'):page.index("</main>")]
    for student, (name, index, cell_id, construct) in result.hidden.items():
        place = f"{name}, cell {index + 1} from the top, id {cell_id}"
        assert re.search(f'<td>{student}</td><td><a href="#opaque-\\d+">{place}</a></td><td><ul>.*?'
                         f"<li><code>{re.escape(html.escape(construct))}</code></li>", section), student
        assert f"{student}: {place}</h3>" in section, student
    assert "exec(bytes.fromhex(&quot;" in section and not active_markup(page) and "default-src 'none'" in page
    summary = similarity.summary(result)
    assert all(f"opaque: {student}: {name}, cell {index + 1}" in summary
               for student, (name, index, _, _) in result.hidden.items())


def test_a_module_is_installed_only_where_a_kernel_has_it(monkeypatch):
    """What a hand-in may import unread: the standard library, the environment's packages (a namespace package
    such as mpl_toolkits too) and the course's package; never a folder of wherever the report runs (a module a
    notebook writes could take the name of the course's release/ or tools/)."""
    from attention_course.grading.similarity.opaque import installed

    monkeypatch.chdir(ROOT)
    installed.cache_clear()
    assert all(map(installed, ("os", "numpy", "torch", "mpl_toolkits", "attention_course")))
    assert not any(map(installed, ("release", "submitted", "tools", "tests", "answer_impl", "a.b", "")))


def test_the_masters_the_catalogues_the_disguises_and_the_release_are_never_opaque():
    """Every code cell of every master (hidden tests included) and of the release, read as one hand-in each, and the
    cells of each catalogue entry's hand-in and of each disguise of the demo student's that are not the master's
    solution's: nothing opaque (``getattr(layer, name)``, ``%run -i`` of a ``%%writefile`` module, imports of
    installed modules...)."""
    from attention_course.grading.similarity.opaque import read

    def code(notebooks: dict) -> list[str]:
        return [cell_source(c) for nb in notebooks.values() if isinstance(nb, dict)
                for c in nb["cells"] if c["cell_type"] == "code"]

    for assignment in available():
        masters = {p.name: read_notebook(p) for p in sorted((ROOT / "source" / assignment).glob("*.ipynb"))}
        release = {n: read_notebook(ROOT / "release" / assignment / n) for n in masters}
        catalogue = load_catalogue(catalogue_path(assignment))
        solution = set(code({name: solved_notebook(nb) for name, nb in masters.items()}))
        handins = {"master": code(masters), "release": code(release)}
        for sub in catalogue:
            notebooks = release if sub.base == BLANK else apply_submission(masters, sub)
            handins[sub.name] = code(sub.transform(notebooks) if sub.transform else notebooks)
        original = apply_submission(masters, demo_roster(catalogue)[COPIED])
        handins.update({f"disguise-{kind}": code(disguised(original, kind, seed=i)) for i, kind in enumerate(KINDS)})
        for who, sources in handins.items():
            _, found = read([s for s in sources if s not in solution] if who not in ("master", "release") else sources,
                            {}, {})
            assert not any(found), f"{assignment}, {who}: {[f for f in found if f]}"


def test_the_page_shows_each_flagged_pair_side_by_side(reports):
    course, result, data = reports["06_efficient_attention"]
    page = (course / "report" / "similarity" / "06_efficient_attention.html").read_text(encoding="utf-8")
    flagged = [p for p in data["pairs"] if p["flagged"]]
    assert page.count('<div class="pair">') == len(flagged) > 0
    assert page.count("<mark>") >= len(flagged) and "<script" not in page
    assert (course / "report" / "similarity" / "06_efficient_attention_scores.png").stat().st_size > 5000
    assert f"threshold {similarity.THRESHOLD:g}" in page


def test_a_solution_copied_by_many_is_common_code_unless_the_limit_is_raised(tmp_path):
    """27 hand-ins of 02 that are all the master with one change: by default (MOSS's limit) their shared code is
    common and almost nothing is flagged; with the limit above the class's size every copy of the master is."""
    import subprocess
    import sys

    from tools.submissions import catalogue_roster

    assignment = "02_multihead_attention"
    course = tmp_path / "leak"
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    write_class(course, assignment, catalogue_roster(load_catalogue(catalogue_path(assignment))))
    default = similarity.write(course, assignment)
    n = len(default.students)
    assert sum(p["flagged"] for p in default.pairs) <= 3, default.pairs[:5]
    run = subprocess.run([sys.executable, "-m", "attention_course.grading", "--course", str(course), "similarity",
                          assignment, "--common", str(n)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads((course / "report" / "similarity" / f"{assignment}.json").read_text(encoding="utf-8"))
    assert sum(p["flagged"] for p in data["pairs"]) > n, run.stdout[:500]
    assert "flagged" in run.stdout and assignment in run.stdout


#: Every disguise of tools/disguises.py, one copy of the demo student's hand-in each, dealt to classes of eight:
#: the demo student, the master's solution and two independent authors, and four disguised copies.
KINDS = DISGUISES
PER_CLASS = 4


@pytest.fixture(scope="module")
def disguised_classes(tmp_path_factory):
    """Per assignment, classes of eight: the demo student and four copies of her hand-in, each disguised one way of
    KINDS; the master's solution, a catalogue alternative in another style and the catalogue's answer written in a
    style of its own (``alt-own-style``), three independent authors; assignment -> pairs of every class."""
    out = {}
    for assignment in available():
        catalogue = load_catalogue(catalogue_path(assignment))
        other = next(s for s in catalogue if s.name == OTHER_STYLE[assignment])
        own = next(s for s in catalogue if s.name == "alt-own-style")
        out[assignment] = {}
        for first in range(0, len(KINDS), PER_CLASS):
            course = tmp_path_factory.mktemp("disguises") / assignment
            for part in ("source", "release"):
                shutil.copytree(ROOT / part / assignment, course / part / assignment)
            write_class(course, assignment, {"master": COMPLETE, COPIED: demo_roster(catalogue)[COPIED],
                                             "other-style": other, "own-style": own})
            names = [p.name for p in sorted((course / "source" / assignment).glob("*.ipynb"))]
            original = {name: read_notebook(course / "submitted" / COPIED / assignment / name) for name in names}
            for i, kind in enumerate(KINDS[first:first + PER_CLASS], start=first):
                for name, nb in disguised(original, kind, seed=i).items():
                    write_notebook(nb, course / "submitted" / f"copy-{kind}" / assignment / name)
            result = similarity.analyse(course, assignment)
            assert len(result.students) == 8 and not result.skipped, (result.students, result.skipped)
            assert not result.opaque, f"{assignment}: a disguise or an independent author named opaque: {result.opaque}"
            out[assignment].update({frozenset(p["students"]): p for p in result.pairs})
    return out


@pytest.mark.parametrize("assignment", available())
def test_every_disguise_is_flagged_above_every_pair_of_independent_authors(disguised_classes, assignment):
    pairs = disguised_classes[assignment]
    score = lambda a, b: pairs.get(frozenset((a, b)), {"score": 0.0})["score"]  # noqa: E731
    authors = ("other-style", "own-style")
    independent = max(score(a, who) for a in authors
                      for who in ("master", COPIED, *authors, *(f"copy-{k}" for k in KINDS)) if who != a)
    for kind in KINDS:
        copied = score(COPIED, f"copy-{kind}")
        assert copied >= similarity.THRESHOLD and copied > independent, \
            f"{assignment}: the {kind} copy scores {copied:.2f}, independent authors up to {independent:.2f}"
    assert independent < similarity.THRESHOLD, f"{assignment}: independent authors flagged ({independent:.2f})"


@pytest.mark.slow  # make test: determinism of a part's JSON stays in make check (test_similarity_parts); make check keeps under 3 minutes
def test_two_runs_give_the_same_json(reports, opaque_class, tmp_path):
    """In two processes with different hash seeds (copydetect's own hashing is randomised per process), for a class
    with flagged pairs and one with opaque hand-ins."""
    import os
    import subprocess
    import sys

    for course, assignment, key in ((reports["02_multihead_attention"][0], "02_multihead_attention", "pairs"),
                                    (opaque_class[0], "01_self_attention", "opaque")):
        texts = []
        for seed in ("1", "2"):
            out = tmp_path / key / seed
            subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                            "from attention_course.grading import similarity; "
                            "similarity.write(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))",
                            str(course), assignment, str(out)], check=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONHASHSEED=seed))
            texts.append((out / f"{assignment}.json").read_text(encoding="utf-8"))
        assert texts[0] == texts[1] and json.loads(texts[0])[key]


def test_normalising_undoes_renaming_comments_docstrings_formatting_and_order():
    from copydetect.utils import filter_code

    original = '''
import numpy as np

def softmax(S, axis=-1):
    """Row-wise softmax."""
    shifted = S - S.max(axis=axis, keepdims=True)  # stable
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)

def attention(Q, K, V):
    return softmax(Q @ K.T / np.sqrt(Q.shape[-1])) @ V

class Head:
    def __init__(self, d):
        self.d = d
'''
    disguised = '''
import numpy as np
class Head:
    def __init__(me, width): me.d = width
def attention(query, key, value):
    # the whole thing
    return softmax(query@key.T/np.sqrt(query.shape[-1]))@value
def softmax(scores,
            axis = -1):
    "My implementation."
    centred = scores - scores.max(axis = axis, keepdims = True)
    ex = np.exp(centred)
    return ex / ex.sum(axis=axis, keepdims=True)
'''
    a, b = (filter_code(similarity.normalise(code), "cell.py", "python")[0] for code in (original, disguised))
    assert a == b
    assert similarity.normalise("def f(:\n  pass") == "def f(:\n  pass"  # code that does not parse stays as written


@pytest.mark.slow
def test_the_page_meets_wcag_aa(reports, opaque_class):
    from browser import chromium, require_axe, wcag_failures

    require_axe()
    course, _, _ = reports["06_efficient_attention"]
    hidden = opaque_class[0] / "report" / "similarity" / "01_self_attention.html"
    with chromium() as browser:
        failed = wcag_failures(browser, {"similarity": course / "report" / "similarity" / "06_efficient_attention.html",
                                         "opaque": hidden})
    assert not failed, failed


@pytest.mark.slow  # make test: make bench runs the 500-hand-in class; make check keeps under 3 minutes
def test_the_bench_class_flags_every_copied_author_above_every_pair_of_independent_authors(tmp_path):
    """``make bench``'s class (tools/bench_similarity.py) at 60 hand-ins of 01: every author written in a style of
    its own, copied once in each way of disguising, is flagged above every pair of independent authors, and none of those is flagged (the
    500-hand-in run prints the same verdicts)."""
    from tools.bench_similarity import copied_authors, verdicts, write_students

    assignment = "01_self_attention"
    course = tmp_path / "bench"
    source = write_students(course, 60, assignment)
    authors = {a.name for a in copied_authors(assignment)}
    assert "alt-own-style" in authors and sum(who in authors for who in source.values()) == (1 + len(KINDS)) * len(authors)
    similarity.write(course, assignment)
    lines, holds = verdicts(course, source, assignment)
    assert holds, lines


@pytest.mark.slow
@pytest.mark.skipif(not SWEEP, reason="make sweep grades every disguised copy")
@pytest.mark.parametrize("assignment", available())
def test_a_disguised_copy_earns_what_its_original_earns(tmp_path, assignment):
    """The disguises are what a student could hand in: each copy of the demo student's hand-in and of the
    independent author's (every kind of tools/disguises.py) earns exactly the autograded points of its original."""
    from harness import course_autograde, read_scores, released_course

    catalogue = load_catalogue(catalogue_path(assignment))
    course = released_course(tmp_path, [assignment])
    write_class(course, assignment, {COPIED: demo_roster(catalogue)[COPIED],
                                     "own": next(s for s in catalogue if s.name == "alt-own-style")})
    names = [p.name for p in sorted((course / "release" / assignment).glob("*.ipynb"))]
    for base in (COPIED, "own"):
        original = {name: read_notebook(course / "submitted" / base / assignment / name) for name in names}
        for i, kind in enumerate(KINDS):
            for name, nb in disguised(original, kind, seed=i).items():
                write_notebook(nb, course / "submitted" / f"{base}-{kind}" / assignment / name)
    course_autograde(course, assignment)
    scores = read_scores(course, assignment)
    auto = {who: {cell: v[0] for cell, v in cells.items() if not v[2]} for who, cells in scores.items()}
    differ = {f"{base}-{kind}": {c: (auto[base][c], p) for c, p in auto[f"{base}-{kind}"].items() if p != auto[base][c]}
              for base in (COPIED, "own") for kind in KINDS}
    assert not any(differ.values()), {who: d for who, d in differ.items() if d}
