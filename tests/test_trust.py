"""The trust rules of :mod:`attention_course.grading.trust`, each attacked directly (fast: no grading run).

The same rules are attacked end to end by the hostile hand-ins of ``tests/catalogue/adversarial.py``
(test_security.py) and, for what reaches a page, in Chromium (test_browser_inert.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from attention_course.grading import trust
from attention_course.grading.errors import EnvironmentMismatch
from attention_course.grading.nbgrader_glue import patches as nbgrader_patches

sys.path.insert(0, str(Path(__file__).parent / "tools"))
import payloads  # noqa: E402


def make_handin(root: Path, outside: Path) -> Path:
    handin = root / "submitted" / "eve" / "01"
    (handin / "data").mkdir(parents=True)
    (handin / "self_attention.ipynb").write_text("{}")
    (handin / "data" / "ok.csv").write_text("1,2\n")
    outside.write_text("secret")
    (handin / "to-outside.txt").symlink_to(outside)
    (handin / "dangling").symlink_to(root / "nowhere")
    (handin / "to-folder").symlink_to(root, target_is_directory=True)
    os.mkfifo(handin / "pipe")
    os.link(outside, handin / "hard-outside.txt")
    os.link(handin / "data" / "ok.csv", handin / "data" / "twin.csv")  # both names inside: fine
    with open(handin / "big.bin", "wb") as f:
        f.truncate(3 * 2**20)
    return handin


def test_hand_in_files_are_data(tmp_path):
    handin = make_handin(tmp_path, tmp_path / "secret.txt")
    found = trust.inspect_handin(handin, within=tmp_path / "submitted", max_file=2 * 2**20)
    files = {rel for _, rel, _ in found.files}
    assert files == {"self_attention.ipynb", "data/ok.csv", "data/twin.csv"}
    refused = dict(found.refused)
    assert set(refused) == {"to-outside.txt", "dangling", "to-folder", "pipe", "hard-outside.txt", "big.bin"}
    assert "symbolic link" in refused["to-outside.txt"] and "symbolic link" in refused["to-folder"]
    assert "pipe" in refused["pipe"] and "outside the hand-in" in refused["hard-outside.txt"]
    assert "larger than 2 MiB" in refused["big.bin"]


def test_the_total_size_is_capped(tmp_path):
    for i in range(4):
        (tmp_path / f"f{i}").write_bytes(b"x" * 1000)
    found = trust.inspect_handin(tmp_path, max_total=2500)
    assert len(found.files) == 2 and [rel for rel, _ in found.refused] == ["f2", "f3"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device file needs root")
def test_device_files_are_refused(tmp_path):
    os.mknod(tmp_path / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    assert dict(trust.inspect_handin(tmp_path).refused) == {"zero": "a device file, not a file"}


def test_a_linked_hand_in_folder_is_refused_whole(tmp_path):
    real = tmp_path / "submitted" / "ada" / "01"
    real.mkdir(parents=True)
    (real / "self_attention.ipynb").write_text("{}")
    (tmp_path / "submitted" / "eve").mkdir()
    (tmp_path / "submitted" / "eve" / "01").symlink_to(real, target_is_directory=True)
    (tmp_path / "submitted" / "mallory").symlink_to(tmp_path / "submitted" / "ada", target_is_directory=True)
    for student in ("eve", "mallory"):
        found = trust.submitted(tmp_path, student, "01")
        assert not found.files and "symbolic link" in found.refused[0][1], found


def test_copies_never_follow_links(tmp_path):
    handin = make_handin(tmp_path, tmp_path / "secret.txt")
    problems = trust.safe_copy(handin, tmp_path / "copy").problems()
    copy = tmp_path / "copy"
    regular = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file() and not p.is_symlink())
    assert regular == ["big.bin", "data/ok.csv", "data/twin.csv", "self_attention.ipynb"]
    links = {p.name: os.readlink(p) for p in copy.rglob("*") if p.is_symlink()}
    assert links == {n: os.readlink(handin / n) for n in ("to-outside.txt", "dangling", "to-folder")}, links
    assert not (copy / "pipe").exists() and not (copy / "hard-outside.txt").exists()
    assert trust.inspect_handin(copy).files == trust.inspect_handin(copy).files and \
        {rel for rel, _ in trust.inspect_handin(copy).refused} == set(links), "the copy is refused as the original"
    assert len(problems) == 5 and all(": " in p for p in problems)


def test_small_metadata_files_are_read_only_when_regular(tmp_path):
    (tmp_path / "timestamp.txt").write_text("2026-11-25 10:00:00.000001 UTC")
    assert trust.exchange_metadata(tmp_path) == {"timestamp.txt": "2026-11-25 10:00:00.000001 UTC"}
    (tmp_path / "timestamp.txt").unlink()
    (tmp_path / "timestamp.txt").symlink_to("/etc/hostname")
    os.mkfifo(tmp_path / "submission_secret.txt")  # a pipe would block a plain open() for ever
    assert trust.exchange_metadata(tmp_path) == {}
    assert trust.read_small(tmp_path / "submission_secret.txt") is None
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "submission_secret.txt").write_text("<script>alert(1)</script>")
    assert trust.exchange_metadata(tmp_path / "other") == {}


def test_names_from_a_hand_in_are_printed_escaped():
    assert trust.display_name("a\x1b[2Jb\nc") == "a\\x1b[2Jb\\x0ac"


def _cell(source, kind="code", **nbgrader):
    return {"cell_type": kind, "source": source, "metadata": {"nbgrader": nbgrader} if nbgrader else {}, "outputs": []}


def test_a_hand_in_cannot_change_what_its_cells_are():
    """Forged points and roles, a rewritten test, moved, duplicated and deleted cells: the gradebook and the
    master decide; the student's text survives only in the cells that are theirs."""
    gradebook = {"setup": ("code", "import numpy as np", True, "c1", None, None),
                 "answer": ("code", "# your code", False, None, 3.0, "solution"),
                 "test": ("code", "assert f() == 1", True, "c2", 2.0, None)}
    forged_test = _cell("assert True", grade=True, grade_id="test", locked=False, points=100)
    forged_test["outputs"] = [{"output_type": "display_data", "data": {"text/html": "<script>x()</script>"}}]
    bonus = _cell("print(1)", grade=True, grade_id="bonus", points=50, solution=True)
    bonus["metadata"]["tags"] = ["skip-execution"]
    hand_in = [forged_test, _cell("def f():\n    return 1", grade_id="answer", solution=True, points=99), bonus,
               _cell("def f():\n    return 2", grade_id="answer", solution=True)]
    missing = []
    cells = trust.rebuilt_cells(hand_in, gradebook, ["setup", "answer", "test"], missing.append)
    assert missing == ["setup"]
    assert [c.source for c in cells] == ["import numpy as np", "def f():\n    return 1", "print(1)",
                                         "def f():\n    return 2", "assert f() == 1"]
    md = [c.metadata.get("nbgrader", {}) for c in cells]
    assert md[1]["points"] == 3.0 and md[1]["solution"] and not md[1]["locked"]
    assert md[4] == {"grade": True, "grade_id": "test", "locked": True, "solution": False, "schema_version": 3,
                     "cell_type": "code", "points": 2.0, "checksum": "c2"}
    assert cells[2].metadata == {} and cells[3].metadata == {}, "a forged or duplicated cell is plain student code"
    assert all(c.outputs == [] for c in cells)


def test_the_judge_takes_only_what_the_master_lets_students_define(tmp_path):
    import nbformat

    master = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\ndef helper(x):\n    return x", metadata={"nbgrader": {"locked": True}}),
        nbformat.v4.new_code_cell("def f(x):\n    return x\n### BEGIN STARTER\n# g = 1\n### END STARTER\nhelper = 0"),
    ])
    (tmp_path / "source" / "a").mkdir(parents=True)
    nbformat.write(master, tmp_path / "source" / "a" / "nb.ipynb")
    hand_in = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("evil = 1\ndef f(x):\n    return 0")])
    assert trust.student_names(tmp_path, "a", "nb", hand_in) == {"f", "g"}, "locked names and extras are not taken"
    assert trust.student_names(tmp_path, "b", "nb", hand_in) == {"evil", "f"}, "no master: the hand-in's own cells"


def test_grades_stay_within_what_a_cell_allows():
    assert trust.capped_grade(7, 3, 5) == (5.0, 1.25)
    assert trust.capped_grade(-2, -1, 5) == (0.0, 0.0)
    assert trust.capped_grade(None, None, 5) == (None, None)
    assert trust.capped_grade("4.5", "", 5) == (4.5, None)
    with pytest.raises(ValueError):
        trust.capped_grade(float("nan"), None, 5)


def test_the_gradebook_caps_scores_whoever_sets_them(tmp_path):
    """Set through nbgrader's own model (as the Formgrader's API does): the cap holds at the gradebook."""
    from nbgrader.api import Gradebook

    nbgrader_patches.install()
    with Gradebook(f"sqlite:///{tmp_path / 'gb.db'}") as gb:
        gb.add_assignment("a")
        gb.add_notebook("n", "a")
        gb.add_grade_cell("c", "n", "a", max_score=5, cell_type="markdown")
        gb.add_student("s")
        gb.add_submission("a", "s")
        grade = gb.find_grade("c", "n", "a", "s")
        grade.manual_score, grade.extra_credit = 1000, 10
        gb.db.commit()
        again = gb.find_grade("c", "n", "a", "s")
        assert (again.manual_score, again.extra_credit, again.score) == (5.0, 1.25, 6.25)


def test_outputs_from_a_hand_in_are_inert():
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    outputs = [
        {"output_type": "display_data", "data": {"text/html": "<img src=x onerror=alert(1)>", "text/plain": "<obj>"},
         "metadata": {}},
        {"output_type": "display_data", "data": {"application/javascript": "alert(1)"}, "metadata": {}},
        {"output_type": "display_data", "data": {"image/svg+xml": "<svg onload=alert(1)/>"}, "metadata": {}},
        {"output_type": "display_data", "data": {"image/png": png, "text/plain": "<Figure>"},
         "metadata": {"image/png": {"width": "1 onerror=alert(1)", "height": 40}, "filenames": {"image/png": "x"}}},
        {"output_type": "display_data", "data": {"image/png": 'x" onerror="alert(1)'}, "metadata": {}},
        {"output_type": "execute_result", "data": {"text/markdown": "[x](javascript:alert(1))"}, "metadata": {},
         "execution_count": "1 onclick=alert(1)"},
        {"output_type": "stream", "name": "stdout", "text": ["<b>", "x</b>"]},
        {"output_type": "error", "ename": "E", "evalue": "<i>", "traceback": ["<i>"]},
        {"output_type": "made-up", "data": {}},
    ]
    shown = trust.inert_outputs(outputs)
    assert [o["output_type"] for o in shown] == ["display_data"] * 5 + ["execute_result", "stream", "error"]
    allowed = {"text/plain", *trust.RASTER}
    assert all(set(o.get("data", {})) <= allowed for o in shown)
    assert shown[0]["data"] == {"text/plain": "<obj>"}
    assert "not shown" in shown[1]["data"]["text/plain"] and "not shown" in shown[2]["data"]["text/plain"]
    assert shown[3]["data"]["image/png"] == png and dict(shown[3]["metadata"]) == {"image/png": {"height": 40}}
    assert "image/png" not in shown[4]["data"]
    assert shown[5]["execution_count"] is None and shown[6]["text"] == "<b>x</b>"
    # a figure's text alternative stays, as plain text of bounded length (the page escapes it); anything else goes
    described = trust.inert_outputs([
        {"output_type": "display_data", "data": {"image/png": png},
         "metadata": {"image/png": {"alt": '" onerror="alert(1)\x00\n' + "x" * 5000}}},
        {"output_type": "display_data", "data": {"image/png": png}, "metadata": {"image/png": {"alt": ["a list"]}}}])
    alt = described[0]["metadata"]["image/png"]["alt"]
    assert alt.startswith('" onerror="alert(1) x') and len(alt) == 1000 and alt.isprintable()
    assert dict(described[1]["metadata"]) == {}
    # a count the student's own kernel set (get_ipython().execution_count = -5) leaves a page nbformat takes
    counted = trust.inert_outputs([{"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {},
                                    "execution_count": count} for count in (-5, True, 2.0, 3)])
    assert [o["execution_count"] for o in counted] == [None, None, None, 3]


FORBIDDEN_TAGS = {"script", "iframe", "frame", "frameset", "object", "embed", "form", "button", "input", "style",
                  "svg", "meta", "base", "link", "video", "audio", "source", "marquee", "annotation-xml"}


def active_content(markup: str) -> list[str]:
    """What in ``markup`` a browser could act on: forbidden elements, event handlers, script or remote URLs,
    styles (text that merely shows such things, escaped, is fine)."""
    from html.parser import HTMLParser

    found = []

    class Scan(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag in FORBIDDEN_TAGS:
                found.append(f"<{tag}>")
            for name, value in attrs:
                value = (value or "").strip().lower()
                if name.startswith("on") or name in ("style", "formaction", "background"):
                    found.append(f"{tag} {name}")
                if name in ("href", "src", "action", "data") and not (
                        value.startswith(("https://", "mailto:", "#")) or
                        (tag == "img" and value.startswith("data:image/"))):
                    found.append(f"{tag} {name}={value[:40]}")

    Scan().feed(markup)
    return found


@pytest.mark.parametrize("payload", payloads.HTML + payloads.MARKDOWN)
def test_student_html_keeps_no_active_content(payload):
    """Each payload of the corpus, as HTML and as Markdown rendered the way every page renders it."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    for cleaned in (trust.clean_html(payload), trust.clean_markdown_html(markdown2html_mistune(payload))):
        assert not active_content(cleaned), (payload, cleaned)


def test_the_scan_sees_active_content():
    assert sorted(active_content("<img src=x onerror=alert(1)>")) == ["img onerror", "img src=x"]
    assert active_content("<a href='javascript:alert(1)'>x</a><svg></svg>") == ["a href=javascript:alert(1)", "<svg>"]
    assert active_content("&lt;script&gt;alert(1)&lt;/script&gt;") == []


def test_honest_formatting_survives_the_sanitiser():
    from attention_course.grading.nbgrader_glue.mathml import to_mathml

    math = to_mathml(r"\mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d}}\right)", display=True)
    honest = (f"<h2 id='why'>Why</h2><p><strong>Scaled</strong> <em>scores</em> <code>QK</code> "
              f"<a href='https://arxiv.org/abs/1706.03762'>paper</a> <a href='#why'>up</a></p>{math}"
              "<table><thead><tr><th>d</th></tr></thead><tbody><tr><td>64</td></tr></tbody></table>"
              "<ul><li>one</li></ul><pre><code>x = 1</code></pre>"
              "<img alt='plot' src='data:image/png;base64,iVBORw0KGgo='>")
    cleaned = trust.clean_html(honest)
    for kept in ("<strong>", "<em>", "<code>", "href=\"https://arxiv.org/abs/1706.03762\"", "href=\"#user-content-why\"",
                 "id=\"user-content-why\"", "<math", "<mfrac>", "<msqrt>", "<table>", "<th>", "<li>", "<pre>",
                 "src=\"data:image/png;base64,iVBORw0KGgo=\"", "alt=\"plot\""):
        assert kept in cleaned, (kept, cleaned)
    assert cleaned.count("<m") == honest.count("<m")  # every MathML element kept


def test_a_different_nbgrader_stops_the_course_with_what_it_patches():
    with pytest.raises(EnvironmentMismatch) as stopped:
        nbgrader_patches.check_version("0.9.7")
    message = str(stopped.value)
    assert "0.9.6" in message and "0.9.7" in message and "Autograde.init_assignment" in message
    nbgrader_patches.check_version("0.9.6")


def test_a_new_gradebook_gets_the_schema_version_alembic_names_without_starting_alembic(tmp_path, monkeypatch):
    """nbgrader stamps a new gradebook with the head of its migrations, which stock 0.9.6 asks of the ``alembic``
    command (a Python of its own, for each gradebook made). The course reads the same head in-process: the stamp is
    what ``alembic heads`` prints, and a gradebook is made with no ``alembic`` on PATH."""
    import subprocess

    from nbgrader.api import Gradebook
    from nbgrader.dbutil import _temp_alembic_ini
    from sqlalchemy import create_engine, text

    nbgrader_patches.install()
    with _temp_alembic_ini(f"sqlite:///{tmp_path / 'unused.db'}") as ini:
        stock = subprocess.run([str(Path(sys.executable).parent / "alembic"), "-c", ini, "heads"], capture_output=True,
                               text=True, check=True).stdout.split()[0]
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url):
        pass
    with create_engine(url).connect() as db:
        assert db.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == stock


def test_a_gradebook_with_all_its_tables_is_opened_with_one_look_at_them_and_one_without_them_is_made(tmp_path):
    """nbgrader lists a gradebook's tables, then asks for each whether it exists (``create_all``) at every open (seven
    opens a hand-in). The course lists them once (one query) and opens a gradebook that has them all without the rest,
    still checking the course's row (a new course id is added, as stock nbgrader adds it). One that lacks any table
    (new, deleted and made again at the same path, an older copy put back without the course's own tables, in
    memory) is opened by nbgrader's own ``__init__``, which makes what is missing."""
    import sqlite3

    from nbgrader.api import Course, Gradebook
    from sqlalchemy import event

    nbgrader_patches.install()
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("a")
        engine = gb.engine
    statements = []
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: statements.append(sql))
    with Gradebook(url, "another_course") as gb:
        assert gb.find_assignment("a").name == "a"
        assert {c.id for c in gb.db.query(Course)} == {"default_course", "another_course"}
    looked = [sql for sql in statements if "sqlite_master" in sql or "PRAGMA" in sql.upper()]
    assert len(looked) == 1, looked  # stock nbgrader: the list, then a PRAGMA for each of its tables
    (tmp_path / "gradebook.db").unlink()  # made again at the same path (a Dask worker's new scratch course)
    with Gradebook(url) as gb:
        assert gb.assignments == []
        gb.add_assignment("c")
    with sqlite3.connect(tmp_path / "gradebook.db") as db:  # an older copy, without one of the course's tables
        db.execute("DROP TABLE course_hand_grade")
    with Gradebook(url) as gb:
        assert [a.name for a in gb.assignments] == ["c"]
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'course_hand_grade'").fetchone(), "not made"
    for _ in range(2):  # an in-memory database is a new one at every open
        with Gradebook("sqlite://") as gb:
            assert gb.assignments == []


def test_a_notebooks_autograded_scores_are_written_in_one_transaction_with_stock_nbgraders_rows(tmp_path, monkeypatch):
    """SaveAutoGrades records a notebook in one commit (stock nbgrader 0.9.6 commits after each grade and comment);
    every row is the one stock nbgrader writes, a score graded by hand keeps its "needs grading" mark, and a step
    that fails part-way writes none of the notebook's rows."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import SaveAutoGrades
    from nbgrader.utils import compute_checksum
    from sqlalchemy import event

    from attention_course.grading.nbgrader_glue import speedups

    nbgrader_patches.install()
    assert SaveAutoGrades.preprocess is speedups.save_in_one_transaction, "the course's step is not installed"

    def cell(kind, grade_id, source, **meta):
        made = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
        made.metadata.nbgrader = {"grade_id": grade_id, "grade": False, "solution": False, "locked": False,
                                  "schema_version": 3, **meta}
        made.metadata.nbgrader["checksum"] = compute_checksum(made)
        return made

    nb = nbformat.v4.new_notebook(cells=[
        cell("code", "answer", "def f(): ...", solution=True),  # untouched: "No response."
        cell("code", "passes", "assert True", grade=True, points=2),
        cell("code", "fails", "assert False", grade=True, points=3),
        cell("markdown", "written", "My answer", grade=True, solution=True, points=4),
        cell("markdown", "task", "Describe it", task=True, points=1),
    ])
    nb.cells[2].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="", traceback=[])]
    nb.cells[3].source = "A changed answer"

    def graded(name: str, patched: bool, fail_at: str | None = None) -> dict:
        url = f"sqlite:///{tmp_path / name}.db"
        with Gradebook(url) as gb:
            gb.add_assignment("a")
            gb.add_notebook("n", "a")
            for c in nb.cells:
                m = c.metadata.nbgrader
                if m.get("grade") or m.get("task"):
                    gb.add_grade_cell(m["grade_id"], "n", "a", max_score=m["points"], cell_type=c.cell_type)
                if m.get("solution") or m.get("task"):
                    gb.add_solution_cell(m["grade_id"], "n", "a")
            gb.add_student("s")
            gb.add_submission("a", "s")
            gb.find_grade("written", "n", "a", "s").manual_score = 2  # graded by hand before
            gb.db.commit()
            engine = gb.engine
        commits = []
        event.listen(engine, "commit", lambda conn: commits.append(1))
        with Gradebook(url):
            opening = len(commits)  # (nbgrader's Gradebook commits as it opens)
        step = SaveAutoGrades()
        if fail_at:
            stock_add = SaveAutoGrades._add_score
            monkeypatch.setattr(SaveAutoGrades, "_add_score", lambda self, c, r: (
                stock_add(self, c, r), c.metadata.nbgrader["grade_id"] == fail_at and 1 / 0))
        reads = []
        event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: reads.append(
            sql.lstrip().upper().startswith("SELECT")))
        (speedups.save_in_one_transaction if patched else speedups.STOCK_SAVE)(
            step, nbformat.from_dict(nb), {"nbgrader": {"notebook": "n", "assignment": "a", "student": "s",
                                                         "db_url": url}})
        made = len(commits) - 2 * opening  # (the control's and the step's own opening)
        queries = sum(reads)
        with Gradebook(url) as gb:
            saved = gb.find_submission_notebook("n", "a", "s")
            rows = {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade) for g in saved.grades}
            rows.update({f"comment {c.name}": c.auto_comment for c in saved.comments})
        return {"rows": rows, "commits": made, "queries": queries}

    stock, ours = graded("stock", False), graded("ours", True)
    assert ours["rows"] == stock["rows"], (ours, stock)
    assert ours["rows"]["passes"] == (2, None, False) and ours["rows"]["fails"] == (0, None, False), ours
    assert ours["rows"]["written"][1:] == (2, True) and ours["rows"]["comment answer"] == "No response.", ours
    assert (stock["commits"], ours["commits"]) == (6, 1), "one commit per grade and comment in stock nbgrader, one here"
    # stock nbgrader finds each of the 4 grades and 3 comments by a query of its own; here they are read in two (with
    # the open's list of tables and the course's row)
    assert stock["queries"] >= 7 and ours["queries"] <= 4, (stock["queries"], ours["queries"])
    missing = nbformat.from_dict(nb)
    missing.cells[1].metadata.nbgrader["grade_id"] = "not-in-the-gradebook"
    for patched in (False, True):  # a cell the gradebook lacks fails the step as stock nbgrader fails it
        url = f"sqlite:///{tmp_path / 'ours'}.db"
        with pytest.raises(MissingEntry, match="No such grade: a/n/not-in-the-gradebook for s"):
            (speedups.save_in_one_transaction if patched else speedups.STOCK_SAVE)(
                SaveAutoGrades(), missing, {"nbgrader": {"notebook": "n", "assignment": "a", "student": "s",
                                                         "db_url": url}})
    with pytest.raises(ZeroDivisionError):
        graded("failed", True, fail_at="fails")
    with Gradebook(f"sqlite:///{tmp_path / 'failed'}.db") as gb:
        assert gb.find_grade("passes", "n", "a", "s").auto_score is None, "a half-recorded notebook"


def test_dask_workers_get_only_the_accepted_files(tmp_path):
    """A hand-in travels to a Dask worker as the files inspect_handin accepts, never a link's target."""
    from attention_course.grading.run.cluster import read_tree

    handin = make_handin(tmp_path, tmp_path / "secret.txt")
    sent = read_tree(handin)
    assert set(sent) == {"self_attention.ipynb", "data/ok.csv", "data/twin.csv", "big.bin"}
    assert b"secret" not in b"".join(sent.values())


def test_a_changed_link_is_graded_again(tmp_path):
    """The fingerprint that lets autograde skip an unchanged hand-in covers what was refused, and where a link
    points: re-pointing a link grades the hand-in again (its target is never read either way)."""
    from attention_course.grading.run.plan import fingerprint

    handin = tmp_path / "submitted" / "eve" / "01"
    handin.mkdir(parents=True)
    (handin / "self_attention.ipynb").symlink_to(tmp_path / "one.ipynb")
    first = fingerprint(tmp_path, "01", "eve", "base")
    (tmp_path / "one.ipynb").write_text("changed")  # the target's content is never read
    assert fingerprint(tmp_path, "01", "eve", "base") == first
    (handin / "self_attention.ipynb").unlink()
    (handin / "self_attention.ipynb").symlink_to(tmp_path / "two.ipynb")
    assert fingerprint(tmp_path, "01", "eve", "base") != first


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give folders to other users")
def test_collect_takes_a_folder_only_from_its_owner_and_at_a_time_the_student_cannot_set(tmp_path):
    """inbound/ folders named for a classmate, dated in the future or in the past, links, unknown users: only the
    owner's own folders are taken, each at its inode change time (now), never at the time its name says."""
    import pwd
    import time

    inbound = tmp_path / "inbound"
    inbound.mkdir()
    daemon, nobody = pwd.getpwnam("daemon").pw_uid, pwd.getpwnam("nobody").pw_uid
    past, future = "2000-01-01 00:00:00.000000 UTC", "2099-01-01 00:00:00.000000 UTC"
    folders = {f"daemon+A+{past}+r1": daemon,  # her own, backdated: taken, at the time it was made
               f"daemon+A+{future}+r2": nobody,  # in a classmate's name: refused
               f"nobody+A+{future}+r3": nobody,  # her own, dated in the future: refused
               f"s123+A+{past}+r4": daemon,  # an id whose login differs (the course's table): taken
               f"ghost+A+{past}+r5": nobody,  # no such user: refused
               f"daemon+A+{past}+r7": daemon,  # made by hand, without nbgrader's secret: refused
               f"daemon+A+{past}+r8": daemon,  # a classmate's file put into her folder: refused
               f"daemon+A+{past}+r9": daemon}  # a link inside: refused, nothing of it collected
    for name, uid in folders.items():
        (inbound / name).mkdir()
        for file in ("timestamp.txt", "submission_secret.txt"):
            if not name.endswith("r7") or file == "timestamp.txt":
                (inbound / name / file).write_text(name.split("+")[2])
                os.chown(inbound / name / file, uid, uid)
        os.chown(inbound / name, uid, uid)
    (inbound / f"daemon+A+{past}+r8" / "self_attention.ipynb").write_text("{}")
    os.chown(inbound / f"daemon+A+{past}+r8" / "self_attention.ipynb", nobody, nobody)
    (inbound / f"daemon+A+{past}+r9" / "self_attention.ipynb").symlink_to("/etc/passwd")
    os.lchown(inbound / f"daemon+A+{past}+r9" / "self_attention.ipynb", daemon, daemon)
    (inbound / f"nobody+A+{past}+r6").symlink_to(tmp_path)
    os.lchown(inbound / f"nobody+A+{past}+r6", nobody, nobody)
    names = sorted(p.name for p in inbound.iterdir())
    before = time.time()
    taken, refused = trust.inbound_entries(inbound, names, {"s123": "daemon"})
    assert sorted(e.name for e in taken) == [f"daemon+A+{past}+r1", f"s123+A+{past}+r4"]
    assert all(abs(e.seen.timestamp() - before) < 60 for e in taken), [e.seen for e in taken]
    assert all("its name says 2000-01-01 00:00 UTC; taken as handed in when it came" in e.note for e in taken), \
        [e.note for e in taken]
    why = {r["entry"].split("+")[-1]: r["why"] for r in refused}
    assert set(why) == {"r2", "r3", "r5", "r6", "r7", "r8", "r9"}, why
    assert "no submission_secret.txt" in why["r7"]
    assert "self_attention.ipynb, written by another user" in why["r8"]
    assert "self_attention.ipynb, a symbolic link" in why["r9"]
    assert "claims to be by daemon" in why["r2"] and "owned by nobody" in why["r2"]
    assert "future" in why["r3"] and "no Unix user ghost" in why["r5"] and "link" in why["r6"]
    # an exchange only one user writes (the course's own exchange/): owners are not checked, times still are
    taken, refused = trust.inbound_entries(inbound, names, {}, check_owner=False)
    assert {r["entry"].split("+")[-1] for r in refused} == {"r2", "r3", "r6", "r7", "r9"}
    # what collect refused reaches the grade table's row of the named student and of the owner
    trust.record_refusals(tmp_path, "A", [r for r in trust.inbound_entries(inbound, names, {})[1]])
    said = trust.refusals(tmp_path, "A")
    assert any("owned by nobody" in n for n in said["daemon"]) and any("owned by nobody" in n for n in said["nobody"])
    assert trust.refusals(tmp_path, "B") == {}
    trust.record_refusals(tmp_path, "C", [{"entry": taken[0].name, "student": "daemon", "owner": "", "why": taken[0].note,
                                           "taken": True}])
    assert trust.refusals(tmp_path, "C")["daemon"][0].startswith("a hand-in re-dated by collect: its name says 2000")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_doctor_names_what_the_exchange_and_the_homes_leave_open(tmp_path):
    """`make doctor`'s exchange rows: an exchange that is not sticky, a course folder a student made first, an
    inbound/ students can list, homes others can enter are OPEN; the modes release leaves hold."""
    import pwd

    from attention_course.grading.run.doctor import exchange_findings

    root, homes = tmp_path / "exchange", tmp_path / "home"
    for folder, mode in ((root, 0o777), (homes, 0o755), (homes / "ann", 0o755), (homes / "ben", 0o700)):
        folder.mkdir()
        folder.chmod(mode)

    links = tmp_path / "protected_hardlinks"
    links.write_text("0\n")  # hard links to others' files allowed: a classmate's hand-in can be made late

    def marks():
        return {name: ok for name, ok, _ in exchange_findings(str(root), "c", str(homes), str(links))}

    assert marks() == {"exchange": False, "course": False, "hardlinks": False, "homes": False}
    links.write_text("1\n")
    (root / "c").mkdir()
    os.chown(root / "c", pwd.getpwnam("nobody").pw_uid, -1)  # a student made it before the first release
    (root / "c" / "inbound").mkdir()
    (root / "c" / "inbound").chmod(0o2777)
    assert marks() == {"exchange": False, "course": False, "inbound": False, "hardlinks": True, "homes": False}
    os.chown(root / "c", os.geteuid(), -1)
    root.chmod(0o1777)
    (root / "c" / "inbound").chmod(0o3733)
    (homes / "ann").chmod(0o750)
    assert marks() == {"exchange": True, "course": True, "inbound": True, "hardlinks": True, "homes": True}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the course's folder to another user")
def test_the_exchange_is_prepared_before_any_student_so_nobody_squats_or_lists_it(tmp_path):
    """`hub.prepare_exchange` (make hub, and a real class before students log in): the course's folder is the
    instructor's from the start, the root and inbound/ sticky, inbound/ and feedback/ unlistable; the doctor's
    exchange rows hold."""
    import pwd
    import stat

    from attention_course.grading.deploy import hub
    from attention_course.grading.run.doctor import exchange_findings

    root = tmp_path / "exchange"
    hub.prepare_exchange(root, "a-course", "nobody")
    nobody = pwd.getpwnam("nobody").pw_uid
    modes = {p.name: (stat.S_IMODE(p.stat().st_mode), p.stat().st_uid)
             for p in (root, root / "a-course", *(root / "a-course").iterdir())}
    assert modes == {"exchange": (0o1777, 0), "a-course": (0o755, nobody), "outbound": (0o755, nobody),
                     "inbound": (0o3733, nobody), "feedback": (0o711, nobody)}, modes
    rows = {what: (holds, why) for what, holds, why in exchange_findings(str(root), "a-course", homes=str(tmp_path))}
    assert rows["exchange"][0] and rows["inbound"][0], rows
    assert f"owned by uid {nobody}" in rows["course"][1], rows  # the instructor's (the doctor, run as her, says yours)


def test_a_folder_closed_to_other_users_is_named():
    """`hub.closed_to_others`: why a student's server cannot run a Python below /root (0700)."""
    import shutil
    import tempfile

    from attention_course.grading.deploy import hub

    top = Path(tempfile.mkdtemp())  # in /tmp (1777), which every user passes through
    try:
        top.chmod(0o755)
        inner = top / "closed" / "python"
        inner.mkdir(parents=True)
        (top / "closed").chmod(0o700)
        assert hub.closed_to_others(inner) == top / "closed"
        (top / "closed").chmod(0o755)
        assert hub.closed_to_others(inner) is None
    finally:
        shutil.rmtree(top)


def test_a_gradebook_copy_whose_tests_or_points_are_not_the_masters_is_named():
    """trust.tests_as_in_source: the sanitize step refuses a notebook whose gradebook tests differ from source/."""
    def cell(gid, source, **meta):
        return {"cell_type": "code", "source": source, "metadata": {"nbgrader": {"grade_id": gid, **meta}}}

    master = [cell("answer", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION", solution=True, grade=True, points=3),
              cell("check", "assert x == 1\n### BEGIN HIDDEN TESTS\nassert x > 0\n### END HIDDEN TESTS", grade=True,
                   points=2),
              cell("setup", "import math", locked=True)]
    held = {"answer": ("code", "# YOUR CODE HERE", False, "c1", 3.0, "solution"),
            "check": ("code", master[1]["source"], True, "c2", 2.0, None),
            "setup": ("code", "import math", True, "c3", None, None)}
    assert trust.tests_as_in_source(master, held) == []
    assert trust.tests_as_in_source(None, held) == [], "no master to compare with: nothing to say"
    fixed = [dict(c) for c in master]
    fixed[1] = cell("check", "assert x == 1\n### BEGIN HIDDEN TESTS\nassert x >= 1\n### END HIDDEN TESTS", grade=True,
                    points=4)
    fixed[2] = cell("setup", "import math, cmath", locked=True)
    fixed.append(cell("new_check", "assert True", grade=True, points=1))
    assert sorted(trust.tests_as_in_source(fixed, held)) == sorted([
        "test cell check: points 2 -> 4", "test cell check: its source changed", "read-only cell setup: its source "
        "changed", "cell new_check is new in source/"])
    assert trust.tests_as_in_source(master[:2], held) == ["cell setup is gone from source/"]
    fixed[0] = cell("answer", "### BEGIN SOLUTION\ny = 2\n### END SOLUTION", solution=True, grade=True, points=3)
    assert not [line for line in trust.tests_as_in_source(fixed, held) if "answer" in line], \
        "a solution cell's source is the student's: never compared"


def test_a_hand_in_copied_in_by_hand_takes_its_notebooks_time(tmp_path):
    from datetime import datetime

    (tmp_path / "a.ipynb").write_text("{}")
    (tmp_path / "b.ipynb").write_text("{}")
    (tmp_path / "notes.txt").write_text("later")
    os.utime(tmp_path / "a.ipynb", (1_800_000_000, 1_800_000_000))
    os.utime(tmp_path / "b.ipynb", (1_800_000_100, 1_800_000_100))
    os.utime(tmp_path / "notes.txt", (1_900_000_000, 1_900_000_000))  # not a notebook: not its time
    when, text = trust.handed_in_time(trust.inspect_handin(tmp_path))
    assert when == datetime(2027, 1, 15, 8, 1, 40) and text == "2027-01-15 08:01:40.000000 UTC"
    trust.write_exchange_metadata(tmp_path / "graded", {"timestamp.txt": text})  # what feedback/ then carries
    assert trust.exchange_metadata(tmp_path / "graded") == {"timestamp.txt": text}
    assert trust.handed_in_time(trust.inspect_handin(tmp_path / "empty")) == (None, "")


def _inbound_folder(inbound: Path, name: str, files: dict[str, str]) -> Path:
    entry = inbound / name
    for rel, text in {**files, "submission_secret.txt": "a" * 32}.items():
        (entry / rel).parent.mkdir(parents=True, exist_ok=True)
        (entry / rel).write_text(text)
    return entry


def test_a_hand_in_is_dated_by_the_latest_change_of_anything_in_it(tmp_path):
    """Writing the real notebook into a folder handed in earlier changes the file's inode, not the folder's: the
    hand-in is as late as that write. A folder refused (a link in a sub-folder) and mended later counts from the
    mending. The look (inbound_entries) and the copy (take_inbound) agree, and the copy is what collect dates."""
    import time

    inbound = tmp_path / "inbound"
    entry = _inbound_folder(inbound, "ann+A+2000-01-01 00:00:00.000000 UTC+r1", {"self_attention.ipynb": "{}"})
    handed_in = os.lstat(entry).st_ctime
    time.sleep(0.05)
    (entry / "self_attention.ipynb").write_text('{"late": true}')  # in place: the folder's own time stays
    written = os.lstat(entry / "self_attention.ipynb").st_ctime
    assert os.lstat(entry).st_ctime == handed_in < written
    [seen], _ = trust.inbound_entries(inbound, [entry.name], {}, check_owner=False)
    assert seen.seen.timestamp() == pytest.approx(written, abs=1e-5)
    snap = trust.take_inbound(inbound, seen, tmp_path / "copy")
    assert not snap.whole and snap.changed == pytest.approx(written, abs=1e-5)
    assert (tmp_path / "copy" / "self_attention.ipynb").read_text() == '{"late": true}'

    mended = _inbound_folder(inbound, "ann+A+2000-01-01 00:00:00.000000 UTC+r2",
                             {"self_attention.ipynb": "{}", "data/x.csv": "1"})
    (mended / "data" / "link").symlink_to("/etc/passwd")
    taken, refused = trust.inbound_entries(inbound, [mended.name], {}, check_owner=False)
    assert not taken and "symbolic link" in refused[0]["why"]
    time.sleep(0.05)
    (mended / "data" / "link").unlink()  # mended after the look that refused it
    fixed = os.lstat(mended / "data").st_ctime
    [seen], _ = trust.inbound_entries(inbound, [mended.name], {}, check_owner=False)
    snap = trust.take_inbound(inbound, seen, tmp_path / "copy2")
    assert not snap.whole and snap.changed == pytest.approx(fixed, abs=1e-5) and fixed > os.lstat(mended).st_ctime


def test_a_folder_changed_while_it_is_copied_is_refused_whole_and_nothing_is_read_through_a_link(tmp_path):
    """The student swaps a sub-folder for a link to the grader's files at the moment the copy reaches a file in it
    (here at a fixed point of the walk, as inotify lets her): the copy goes on reading the folder it opened, never
    the link, and the change refuses the whole folder, leaving nothing behind. The same holds for every copy of
    the exchange (trust.safe_copy: submit, release, fetch)."""
    from attention_course.grading.trust import snapshot

    grader = tmp_path / "grader"
    grader.mkdir()
    (grader / "self_attention.ipynb").write_text("MASTER WITH HIDDEN TESTS")
    inbound = tmp_path / "inbound"
    entry = _inbound_folder(inbound, "eve+A+t+r1", {"self_attention.ipynb": "{}", "data/a.csv": "1",
                                                    "data/self_attention.ipynb": "decoy"})
    (tmp_path / "link").symlink_to(grader)
    seen_files = []

    def swap(rel, st):  # renameat2(RENAME_EXCHANGE) of data and the link, as eve's inotify watch does it
        seen_files.append(rel)
        if rel == "data/a.csv":
            os.rename(entry / "data", tmp_path / "away")
            os.rename(tmp_path / "link", entry / "data")
        return False

    for copy in (lambda dest: snapshot.take(inbound, entry.name, dest, strict=True, ignore=swap),
                 lambda dest: trust.safe_copy(entry, dest, ignore=swap)):
        snap = copy(tmp_path / "copy")
        assert snap.whole and "changed while it was read" in snap.whole, snap
        assert "data/self_attention.ipynb" in seen_files, "the walk stopped before reading the swapped folder"
        copied = [p.read_text() for p in (tmp_path / "copy").rglob("*") if p.is_file()]
        assert "MASTER WITH HIDDEN TESTS" not in copied and (not copied or copied == [])
        for p in (entry / "data", tmp_path / "copy"):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        os.rename(tmp_path / "away", entry / "data")
        (tmp_path / "link").symlink_to(grader)
        seen_files.clear()
    # untouched, the same folder is taken whole, with its time
    snap = snapshot.take(inbound, entry.name, tmp_path / "copy", strict=True)
    assert not snap.whole and sorted(rel for rel, _ in snap.files) == [
        "data/a.csv", "data/self_attention.ipynb", "self_attention.ipynb", "submission_secret.txt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_folder_is_taken_only_from_the_owner_it_was_checked_for(tmp_path):
    """Between the look and the copy the folder's name can come to stand for another folder (a classmate's,
    swapped in by a rename): the copy checks the owner of what it opened, not of the name it looked at."""
    import pwd

    daemon, nobody = pwd.getpwnam("daemon").pw_uid, pwd.getpwnam("nobody").pw_uid
    inbound = tmp_path / "inbound"
    entry = _inbound_folder(inbound, "daemon+A+t+r1", {"self_attention.ipynb": "{}"})
    for path in [entry, *entry.rglob("*")]:
        os.chown(path, daemon, daemon)
    [seen], _ = trust.inbound_entries(inbound, [entry.name], {})
    assert seen.uid == daemon
    os.chown(entry, nobody, nobody)  # the name now stands for a folder of another user
    snap = trust.take_inbound(inbound, seen, tmp_path / "copy")
    assert snap.whole and "not by the student's uid" in snap.whole and not (tmp_path / "copy").exists()
    os.chown(entry, daemon, daemon)
    os.chown(entry / "self_attention.ipynb", nobody, nobody)
    snap = trust.take_inbound(inbound, seen, tmp_path / "copy")
    assert snap.whole and "written by another user" in snap.whole


def test_the_look_never_reports_what_is_behind_a_link_swapped_in(tmp_path):
    """The look that decides which folders collect may take (and whose refusal a student's notice page quotes) reads
    through file descriptors too: swapping her folder for a link to a folder of the grader's at the moment the
    look reads hers gives her a refusal about her own folder, never a name from the other one; a folder nested
    deeper than any hand-in, one of too many names, a name that is not UTF-8 or a path too long is refused, and
    the others are still looked at."""
    import errno

    from attention_course.grading.trust import snapshot

    grader = tmp_path / "grader"
    grader.mkdir()
    (grader / "ann+A+t+SECRETNAME").mkdir()
    inbound = tmp_path / "inbound"
    entry = _inbound_folder(inbound, "eve+A+2000-01-01 00:00:00.000000 UTC+r1", {"self_attention.ipynb": "{}"})

    def swap(rel, st):
        if rel == "self_attention.ipynb" and not (tmp_path / "away").exists():
            os.rename(entry, tmp_path / "away")
            (inbound / entry.name).symlink_to(grader)
        return False

    taken, refused = trust.inbound_entries(inbound, [entry.name], {}, check_owner=False, ignore=swap)
    assert not taken and "SECRETNAME" not in refused[0]["why"] and "changed while it was read" in refused[0]["why"]
    (inbound / entry.name).unlink()
    deep = _inbound_folder(inbound, "bob+A+t+r2", {"/".join(["d"] * (snapshot.MAX_DEPTH + 2)) + "/x": "1"})
    wide = _inbound_folder(inbound, "cat+A+t+r3", {})
    for i in range(snapshot.MAX_ENTRIES + 1):
        (wide / f"f{i}").touch()
    long = _inbound_folder(inbound, "dan+A+t+r4", {})
    path = long
    while len(str(path.relative_to(long))) <= snapshot.MAX_PATH:
        path = path / ("n" * 200)
        try:
            path.mkdir()
        except OSError as exc:
            assert exc.errno == errno.ENAMETOOLONG
            break
    odd = inbound / os.fsdecode(b"fay+A+t+r5\xff")
    odd.mkdir()
    good = _inbound_folder(inbound, "gus+A+t+r6", {"self_attention.ipynb": "{}"})
    names = [deep.name, wide.name, long.name, odd.name, good.name]
    taken, refused = trust.inbound_entries(inbound, names, {}, check_owner=False)
    why = {r["student"]: r["why"] for r in refused}
    assert [e.name for e in taken] == [good.name], why
    assert "deeper than" in why["bob"] and "more than" in why["cat"] and "longer than" in why["dan"], why
    assert any("not valid UTF-8" in w for w in why.values()), why


def test_a_submission_secret_is_one_students():
    """Feedback is released under a name made from a hand-in's secret: whoever has it in submitted/ keeps it; of new
    folders sharing one, the first to come (a copy is made after its original); at the same time, nobody."""
    held = [("ann", "a" * 32), ("bob", None)]
    new = [("mal", "a" * 32, 5.0), ("cat", "c" * 32, 9.0), ("eve", "c" * 32, 7.0), ("dan", "d" * 32, 3.0),
           ("fay", "d" * 32, 3.0), ("gus", "g" * 32, 1.0), ("gus", "g" * 32, 2.0)]
    assert trust.secret_owners(held, new) == {"a" * 32: "ann", "c" * 32: "eve", "d" * 32: "", "g" * 32: "gus"}
