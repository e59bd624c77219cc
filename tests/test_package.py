"""Unit tests of the course package: checks, plots, data, nbgrader extensions, submissions."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import os
import pwd
import re
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from attention_course import (
    assert_close,
    check_shape,
    check_sums_to_one,
    check_unchanged,
    plot_attention,
    plot_matrices,
    projection_params,
    to_numpy,
    toy_sentence,
)
from attention_course.grading.cells import replace_blocks, uncomment
from attention_course.grading.deploy.users import make_users, remove_users
from attention_course.grading.errors import UsageError, UsersNotRemoved
from attention_course.grading.nbgrader_glue.preprocessors import HIDDEN_PLACEHOLDER, CachedHighlight, HideHiddenTests
from tools.submissions import Submission, apply_submission, solved_notebook


def message(fn, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_assert_close_accepts_float32_torch():
    x = np.random.default_rng(0).normal(size=(3, 4))
    assert_close(torch.tensor(x, dtype=torch.float32, requires_grad=True), x, "x")


def test_assert_close_takes_tensors_that_require_grad_on_every_side():
    w = torch.ones(2, 2, requires_grad=True)
    assert_close(w * 1, w, "w", mistakes={"doubled": w * 2})
    assert "doubled" in message(assert_close, w * 2, w, "w", mistakes={"doubled": w * 2})


def test_assert_close_message_teaches_without_the_answer():
    expected = np.array([[0.123456, 0.654321], [0.5, 0.5]])
    got = expected.copy()
    got[1, 0] += 0.25
    msg = message(assert_close, got, expected, "weights", hint="check the axis")
    assert "weights" in msg and "1 of 4" in msg and "rtol=0.0001" in msg and "0.25" in msg and "(1, 0)" in msg
    assert "check the axis" in msg
    assert "0.123456" not in msg and "0.654321" not in msg


def test_assert_close_without_a_hint_says_where_the_wrong_entries_lie():
    """A check that knows no cause for a wrong array (no hint, no matching mistake) says which slices of each axis
    hold the wrong entries, and nothing of the expected values."""
    expected = np.arange(24.0).reshape(2, 3, 4) / 7
    got = expected.copy()
    got[:, 1, :] += 1.0  # one head wrong in every batch element
    msg = message(assert_close, got, expected, "out")
    assert "8 of 24 entries differ" in msg, msg
    assert "every index of axis 0; 1 of the 3 indices of axis 1 (1); every index of axis 2" in msg, msg
    assert "0.142857" not in msg and "1.142857" not in msg, msg
    assert "lie in" not in message(assert_close, got, expected, "out", hint="check the heads")


def test_assert_close_names_a_matching_mistake():
    expected = np.eye(3)
    msg = message(assert_close, expected.T * 2, expected, "A", mistakes={"you doubled it": expected * 2})
    assert "common mistake: you doubled it" in msg


def test_assert_close_reports_shape_and_nan():
    assert "shape (2, 3), expected (3, 2)" in message(assert_close, np.zeros((2, 3)), np.zeros((3, 2)), "S")
    assert "NaN" in message(assert_close, np.array([np.nan, 1.0]), np.ones(2), "p")
    assert "None" in message(assert_close, None, np.ones(2), "out")


def test_check_shape_and_unchanged():
    assert check_shape(torch.zeros(2, 3), (2, 3)) is None
    assert "hint!" in message(check_shape, np.zeros(3), (2, 3), "V", hint="hint!")
    assert "modified in place" in message(check_unchanged, np.zeros(2), np.ones(2), "X")
    check_unchanged(np.ones(2), np.ones(2))
    check_unchanged(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))  # a NaN where it was is not a change
    check_unchanged(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]))
    assert "modified in place" in message(check_unchanged, np.array([np.nan, 1.0]), np.array([0.0, 1.0]), "X")
    assert "modified in place" in message(check_unchanged, np.array([np.nan, 1.0]), np.array([np.nan, 2.0]), "X")
    check_unchanged(np.array([True, False]), np.array([True, False]))
    assert "modified in place" in message(check_unchanged, np.array([1, 2]), np.array([1, 3]), "X")


def test_call_unchanged_names_the_argument_changed_in_place():
    from attention_course import call_unchanged

    def scale_in_place(Q, K, scale=True):
        K /= 2.0
        return Q @ K.T

    def pure(Q, K, scale=True):
        return Q @ K.T

    Q, K = np.ones((2, 3)), np.ones((4, 3))
    assert "the caller's K was modified in place" in message(call_unchanged, scale_in_place, Q, K)
    assert "the caller's K was modified in place" in message(call_unchanged, scale_in_place, torch.ones(2, 3), K=torch.ones(4, 3))
    np.testing.assert_array_equal(call_unchanged(pure, Q, K, scale=False), Q @ K.T)

    class Remote:  # a function living in the student's kernel at autograde: a plain call (arguments go as copies)
        _judge_vjp = None

        def __call__(self, *args):
            args[0][0] = 5.0
            return "called"

    Remote._judge_vjp = lambda *a: None
    assert call_unchanged(Remote(), np.zeros(2)) == "called"


def test_call_unchanged_sees_arrays_inside_the_lists_and_dicts_it_passes():
    """A head's parameters travel in dicts, several heads in a list: scaling one of their arrays in place is named,
    down to the entry, and so is a list or dict whose entries were added or taken away."""
    from attention_course import call_unchanged

    def scale_heads(X, heads):
        for head in heads:
            head["W_q"] /= 2.0
        return X

    def drop_head(X, heads):
        heads.pop()
        return X

    def reads(X, heads):
        return sum(float(h["W_q"].sum()) + h["scale"] for h in heads)

    fresh = lambda: [{"W_q": np.ones((3, 2)), "scale": 1.0}, {"W_q": torch.ones(3, 2), "scale": 2.0}]  # noqa: E731
    assert "the caller's heads[0]['W_q'] was modified in place" in message(call_unchanged, scale_heads, np.ones(2), fresh())
    assert "the caller's heads was modified in place (its length changed)" in message(call_unchanged, drop_head, np.ones(2), fresh())
    assert call_unchanged(reads, np.ones(2), fresh()) == 15.0


def test_check_sums_to_one_spots_the_wrong_axis():
    w = np.array([[0.2, 0.9], [0.8, 0.1]])  # columns sum to 1, rows do not
    check_sums_to_one(w, axis=0)
    assert "wrong axis" in message(check_sums_to_one, w, axis=-1)
    assert "negative" in message(check_sums_to_one, np.array([[1.5, -0.5]]), axis=-1)


def test_to_numpy_rejects_non_numbers():
    assert "array of numbers" in message(to_numpy, {"a": 1}, "x")


def test_plots_draw():
    tokens, X = toy_sentence()
    ax = plot_attention(np.full((len(tokens), len(tokens)), 1 / len(tokens)), tokens, tokens)
    assert ax.get_xlabel().startswith("key")
    fig = plot_matrices({"Q": np.eye(3), "K": torch.ones(2, 3)})
    assert len(fig.axes) >= 2
    with pytest.raises(ValueError):
        plot_attention(np.zeros((2, 2, 2)))


def test_a_figure_is_shown_with_what_it_shows(monkeypatch):
    """show() publishes the PNG with a text alternative: the helpers' descriptions (with the key numbers) or the
    alt text given, and refuses a figure that has neither."""
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell

    from attention_course import description, show

    plt.close("all")
    shell = InteractiveShell.instance()
    published = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, metadata=None, **kw: published.append(metadata))
    try:
        w = np.array([[0.9, 0.1], [0.3, 0.7]])
        ax = plot_attention(w, ["a", "b"], ["x", "y"], title="toy")
        said = description(ax.figure)
        assert "2 queries" in said and "a -> x 0.90" in said and "b -> y 0.70" in said, said
        show()
        assert published[-1]["image/png"]["alt"] == said
        assert not plt.fignum_exists(ax.figure.number), "show() closes the figure it showed"
        plt.plot([1, 2])
        show(alt="A line from 1 to 2.")
        assert published[-1]["image/png"]["alt"] == "A line from 1 to 2."
        plt.plot([1, 2])
        with pytest.raises(ValueError, match="text alternative"):
            show()
        fig = plot_matrices({"Q": np.eye(2), "K": -np.ones((2, 3))})
        assert "Q 2 x 2 from 0.00 to 1.00" in description(fig) and "K 2 x 3 from -1.00 to -1.00" in description(fig)
    finally:
        plt.close("all")
        InteractiveShell.clear_instance()


def test_toy_sentence_is_orthonormal_per_word():
    tokens, X = toy_sentence()
    G = X @ X.T
    same = np.array([[a == b for b in tokens] for a in tokens])
    assert np.allclose(G[same], 1) and np.allclose(G[~same], 0)
    with pytest.raises(ValueError):
        toy_sentence(d_model=4)


def test_projection_params_shapes_and_order():
    p = projection_params(np.random.default_rng(0), 5, 3, 4)
    assert p["W_q"].shape == (5, 3) and p["W_v"].shape == (5, 4) and p["b_v"].shape == (4,)
    c = projection_params(np.random.default_rng(0), 5, 3, 4, convention="column", bias=False)
    assert c["W_q"].shape == (3, 5) and c["W_v"].shape == (4, 5)
    assert c["b_k"].shape == (3, 1) and not c["b_k"].any()


def test_replace_blocks_and_uncomment():
    src = "a\n    ### BEGIN STARTER\n    # x = 1\n    #\n    ### END STARTER\nb"
    assert replace_blocks(src, "### BEGIN STARTER", "### END STARTER", uncomment) == "a\n    x = 1\n\nb"
    assert replace_blocks(src, "### BEGIN STARTER", "### END STARTER", lambda l, i: []) == "a\nb"
    with pytest.raises(ValueError):
        replace_blocks("### BEGIN X\n", "### BEGIN X", "### END X", lambda l, i: l)


def test_hide_hidden_tests_strips_source_and_tracebacks():
    cell = nbformat.v4.new_code_cell("'''doc'''\nvisible()\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "t", "points": 1, "locked": True}
    cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="\x1b[0mweights off",
                                           traceback=["Traceback", "secret()"])]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert "secret" not in nb.cells[0].source and HIDDEN_PLACEHOLDER in nb.cells[0].source
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: weights off"]


def test_cached_highlighting_is_nbconverts_own():
    """Feedback pages highlight a code cell once per process: the same HTML as nbconvert's filter, also for a
    cell with a magic's language and for a cell too long to keep; a repeated cell is not highlighted again."""
    from nbconvert.filters.highlight import Highlight2HTML

    from attention_course.grading.nbgrader_glue import preprocessors as nbgrader_ext

    plain = Highlight2HTML(pygments_lexer="ipython3")
    cached = CachedHighlight(Highlight2HTML(pygments_lexer="ipython3"))
    cells = [("x = softmax(Q @ K.T)  # rows\n", None), ("SELECT 1;", {"magics_language": "sql"}),
             ("y = 1\n" * 5000, None)]
    for source, metadata in cells:
        assert cached(source, None, metadata) == plain(source, None, metadata)
    assert cached(cells[1][0], None, cells[1][1]) != plain(cells[1][0], None, None), "the magic's language was ignored"
    before = nbgrader_ext._highlighted.cache_info()
    assert cached(cells[0][0]) == plain(cells[0][0])
    after = nbgrader_ext._highlighted.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses


def test_submissions_are_built_from_the_master():
    master = {"cells": [
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "f", "solution": True}}, "outputs": [],
         "execution_count": 3, "source": "def f():\n    ### BEGIN STARTER\n    # return 0\n    ### END STARTER\n"
                                          "    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"},
    ]}
    solved = solved_notebook(master)
    assert solved["cells"][0]["source"] == "def f():\n    return 1" and solved["cells"][0]["execution_count"] is None
    nbs = apply_submission({"a.ipynb": master}, Submission("m", "", edits=[("f", "return 1", "return 2")]))
    assert nbs["a.ipynb"]["cells"][0]["source"].endswith("return 2")
    with pytest.raises(ValueError):
        apply_submission({"a.ipynb": master}, Submission("m", "", edits=[("f", "nothing", "x")]))
    with pytest.raises(KeyError):
        apply_submission({"a.ipynb": master}, Submission("m", "", replace={"g": "x"}))


def test_demo_roster_deals_submissions_to_named_students():
    from tools.submissions import BLANK, COMPLETE, DEMO_STUDENTS, demo_roster

    subs = [Submission("m1", "", in_demo=True), Submission("m2", "", in_demo=False), Submission("a1", "", in_demo=True)]
    roster = demo_roster(subs)
    assert roster["demo-complete"] == COMPLETE and roster["demo-blank"] == BLANK
    assert [roster[s] for s in DEMO_STUDENTS[:2]] == [subs[0], subs[2]]
    assert all(roster[s] == COMPLETE for s in DEMO_STUDENTS[2:])


def test_feedback_shows_printed_output_as_text(tmp_path, monkeypatch):
    """The outputs of a student's own cells reach feedback as text, not as the lists of lines a notebook
    file stores them in."""
    import json

    from attention_course.grading.nbgrader_glue.preprocessors import submitted_outputs

    folder = tmp_path / "submitted" / "ann" / "a1"
    folder.mkdir(parents=True)
    cell = {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": 1, "source": ["print('x')\n", "print('y')"],
            "outputs": [{"output_type": "stream", "name": "stdout", "text": ["x\n", "y\n"]}]}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "nb.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    found = submitted_outputs("ann", "a1", "nb")
    assert found["print('x')\nprint('y')"][0][0]["text"] == "x\ny\n"


def test_failed_check_shows_the_students_line_and_the_message_not_the_checks_code():
    """In a real kernel a failed check's traceback ends at the student's line; a student's own assert
    keeps every frame; and the cell still counts as failed (Validate and nbclient see the error)."""
    import re

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    cells = [
        "import numpy as np\nfrom attention_course import assert_close, check_shape",
        "A = np.zeros((2, 3))\nassert_close(A, np.ones((2, 3)), 'A')",
        "check_shape(np.zeros(4), (2, 2), 'B')",
        "def mine():\n    assert 1 == 2, 'my own'\nmine()",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    plain = []
    for cell in nb.cells[1:]:
        (err,) = [o for o in cell.outputs if o.output_type == "error"]
        assert err.ename == "AssertionError"
        plain.append(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(err.traceback)))
    for text, line in zip(plain[:2], ["assert_close(A, np.ones((2, 3)), 'A')", "check_shape(np.zeros(4)"]):
        assert line in text and "checks.py" not in text and "raise AssertionError" not in text, text
    assert "A: 6 of 6 entries differ" in plain[0] and "B has shape (4,)" in plain[1]
    assert "in mine()" in plain[2] and "assert 1 == 2, 'my own'" in plain[2]
    with pytest.raises(CellExecutionError):
        NotebookClient(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells[:2]]),
                       kernel_name="python3", timeout=120).execute()


def test_typeset_math_turns_tex_into_mathml_and_leaves_code_alone():
    from attention_course.grading.nbgrader_glue.mathml import typeset

    out = typeset("Scale by $\\sqrt{d_k}$; it costs \\$5.\n\n$$A = \\frac{QK^\\top}{\\sqrt{d_k}}$$\n\n"
                  "`x = '$a$'` and\n```\ny = '$b$'\n```\n")
    assert out.count("<math") == 2 and 'display="block"' in out and "<msqrt>" in out
    assert "\\$5" in out and "`x = '$a$'`" in out and "y = '$b$'" in out
    # the MathML holds nothing Markdown would read as emphasis or code
    for math in re.findall(r"<math.*?</math>", out):
        assert not re.search(r">[^<]*[*_`\\\\$][^<]*<", math), math
    assert typeset("price: $ 5 and $ 6") == "price: $ 5 and $ 6"  # not a formula


def test_the_grader_passes_the_expected_value_log_under_one_name():
    from attention_course import checks
    from attention_course.grading.kernels import forkserver

    assert forkserver.EXPECTED_LOG == checks.EXPECTED_LOG


def test_a_shell_without_the_variable_finds_the_class_exchange(tmp_path, monkeypatch):
    """The course's configuration keeps the Exchange.root of the user's or the system's nbgrader configuration
    (what a JupyterHub deployment sets for everybody), so an instructor's ssh or cron shell without
    NBGRADER_EXCHANGE_ROOT collects from the class's exchange, not from the course's own empty exchange/; the
    variable, where set, wins; with neither, the course's own folder. The first case through nbgrader itself."""
    import os
    import subprocess
    import sys

    from attention_course.grading.course import ROOT, exchange_root

    shared, config = tmp_path / "srv-exchange", tmp_path / "jupyter"
    config.mkdir()
    monkeypatch.delenv("NBGRADER_EXCHANGE_ROOT", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    assert exchange_root(ROOT) == str(ROOT / "exchange")
    (config / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(shared)!r}\n")
    code = "from nbgrader.apps.baseapp import NbGrader; a = NbGrader(); a.initialize([]); print(a.config.Exchange.root)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str(shared), "the course's configuration hid the system's exchange"
    monkeypatch.setenv("NBGRADER_EXCHANGE_ROOT", str(tmp_path / "mine"))
    assert exchange_root(ROOT) == str(tmp_path / "mine")


def test_how_late_is_said_in_words_and_a_few_seconds_are_never_0_minutes():
    from attention_course.grading.nbgrader_glue.term import late_words

    said = [late_words(s) for s in (0, -5, 0.4, 1, 23.4, 59.4, 59.6, 60, 100, 59 * 60, 3570, 3599, 3600, 47.9 * 3600,
                                    47.95 * 3600, 48 * 3600)]
    assert said == ["", "", "1 second late", "1 second late", "23 seconds late", "59 seconds late", "1 minute late",
                    "1 minute late", "2 minutes late", "59 minutes late", "1.0 hours late", "1.0 hours late",
                    "1.0 hours late", "47.9 hours late", "2.0 days late", "2.0 days late"]


def test_the_term_reads_due_dates_with_their_zone_and_applies_the_late_policy(tmp_path):
    from datetime import datetime, timedelta
    from types import SimpleNamespace

    from attention_course.grading.errors import ConfigError
    from attention_course.grading.nbgrader_glue.term import Term

    term = Term(due={"a": "2027-01-22 17:00:00 Europe/London", "b": "2027-07-22T17:00:00+02:00"},
                late_share_per_day=0.1, late_cap=0.35, extensions=str(tmp_path / "extensions.csv"))
    assert term.due_date("a") == datetime(2027, 1, 22, 17) and term.due_date("b") == datetime(2027, 7, 22, 15)
    assert term.due_date("none") is None
    day = 86400
    assert [term.penalty(80, s) for s in (0, 1, day, day + 1, 3 * day, 30 * day)] == [0, 8, 8, 16, 24, 28]
    assert term.penalty(0, day) == 0
    (tmp_path / "extensions.csv").write_text("student,assignment,days\nann,a,1.5\n")
    assert term.extension("ann", "a") == timedelta(days=1.5) and term.extension("ben", "a") is None

    def handed_in(student, when):
        return SimpleNamespace(assignment=SimpleNamespace(name="a", duedate=None), student=SimpleNamespace(id=student),
                               timestamp=when)

    assert term.seconds_late(handed_in("ben", datetime(2027, 1, 22, 18))) == 3600
    assert term.seconds_late(handed_in("ann", datetime(2027, 1, 22, 18))) == 0, "within her extension"
    assert term.seconds_late(handed_in("ben", None)) == 0
    term.check()
    for bad in ("2027-01-22 17:00:00", "2027-01-22 17:00:00 Nowhere/Atlantis", "next friday"):
        with pytest.raises(ConfigError, match="give the date with its zone"):
            Term(due={"a": bad}).check()
    with pytest.raises(ConfigError, match=r"as seconds, not hours: .*'2027-01-22T17:00:00\+01:00'"):
        Term(due={"a": "2027-01-22 17:00:00 +0100"}).check()  # nbgrader: 100 seconds
    (tmp_path / "extensions.csv").write_text("student,assignment,days\nann,a,soon\n")
    with pytest.raises(ConfigError, match="line 2: an extension needs"):
        Term(extensions=str(tmp_path / "extensions.csv")).check()


def test_the_printed_grade_table_is_narrow_and_marks_provisional_and_late_scores():
    from attention_course.grading.run.tables import printable

    header = ["student", "01_self_attention (/95)", "02_multihead_attention (/100)", "total", "max", "late penalty",
              "to grade by hand", "provisional", "notes"]
    rows = [["ann", 95, 80, 175, 195, 0, 0, "", ""],
            ["ben", 76, "not graded", 76, 195, 19, 2, "yes", "01_self_attention: 36.0 hours late, 95 - 19 = 76"]]
    text = printable(header, rows, {("ann", "01_self_attention"): "", ("ben", "01_self_attention"): "*L"})
    assert "01 /95" in text and "02 /100" in text and "76*L" in text and "not graded" in text
    assert "*  provisional" in text and "ben: 01_self_attention: 36.0 hours late" in text
    assert max(len(line) for line in text.splitlines()[:4]) < 80, text


def test_the_hub_environment_copies_only_pinned_packages_whose_files_match_their_record(tmp_path):
    """environment.copy_installed: a package at its pinned version whose every file has the hash its RECORD gives is copied
    whole (its bytecode taken as current, its script naming the new environment's interpreter); one with a changed
    file, one at another version, and one the new environment has already are left for pip; a RECORD entry leading
    out of the environment writes nothing."""
    import base64
    import hashlib
    import importlib.util
    import os
    import py_compile
    import subprocess
    import sys
    from pathlib import Path

    from attention_course.grading.deploy.environment import copy_installed

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    def package(site: Path, name: str, version: str, files: dict, changed=()) -> None:
        info = site / f"{name}-{version}.dist-info"
        files = {**files, f"{info.name}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
        rows = []
        for rel, text in files.items():
            path = Path(os.path.normpath(site / rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + ("# changed after install\n" if rel in changed else ""))
            rows.append(f"{rel},{digest(text.encode())},{len(text)}")
        (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")

    def environment(name: str) -> Path:
        site = tmp_path / name / "lib" / "python3.11" / "site-packages"
        site.mkdir(parents=True)
        return site

    course, env = environment("course"), environment("env")
    script = f"#!{tmp_path / 'course' / 'bin' / 'python3.11'}\nimport sys\n"
    package(course, "good", "1.0", {"good/__init__.py": "X = 'good'\n", "../../../bin/good-tool": script,
                                    "../../../../outside.txt": "out\n", "../../../share/good/data.json": "{}\n"})
    package(course, "tampered", "1.0", {"tampered/__init__.py": "X = 1\n"}, changed={"tampered/__init__.py"})
    package(course, "newer", "2.0", {"newer/__init__.py": "X = 2\n"})
    package(course, "there", "1.0", {"there/__init__.py": "X = 3\n"})
    package(env, "there", "0.9", {"there/__init__.py": "X = 0\n"})
    (tmp_path / "outside.txt").unlink()  # (written there by the course's install, never by the copy)
    os.utime(course / "good" / "__init__.py", (1_000_000_000, 1_000_000_000))
    py_compile.compile(str(course / "good" / "__init__.py"),
                       cfile=importlib.util.cache_from_source(str(course / "good" / "__init__.py")))
    wanted = {n: f"{n}==1.0" for n in ("good", "tampered", "newer", "there")}

    assert copy_installed(course, env, wanted) == ["good"]
    assert sorted(p.name for p in env.iterdir()) == ["good", "good-1.0.dist-info", "there", "there-0.9.dist-info"]
    assert (env / "there" / "__init__.py").read_text() == "X = 0\n"  # what the environment had is left alone
    assert (tmp_path / "env" / "share" / "good" / "data.json").is_file()
    assert (tmp_path / "env" / "bin" / "good-tool").read_text() == f"#!{tmp_path / 'env' / 'bin' / 'python3.11'}\nimport sys\n"
    assert (tmp_path / "course" / "bin" / "good-tool").read_text() == script  # the course's own is unchanged
    assert not (tmp_path / "outside.txt").exists()
    loaded = subprocess.run([sys.executable, "-v", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import good",
                             str(env)], capture_output=True, text=True).stderr  # -v: where each module came from
    pyc = importlib.util.cache_from_source(str(env / "good" / "__init__.py"))
    assert f"code object from '{pyc}'" in loaded, loaded[-2000:]  # taken as current, not compiled again


def test_the_bench_allows_stock_nbgrader_only_the_differences_the_courses_rules_make():
    """``make bench`` compares stock nbgrader's per-cell grades with the course's: a difference passes only when a
    stated rule makes it (named in the bench's output), any other fails the bench."""
    from tools.bench import STOCK_RULES, stock_differs_by_rule

    mistake = Submission("unscaled", "", loses=frozenset({"test_scores"}), says="x")
    in_place = Submission("softmax-in-place", "", noted="changed its argument S in place")
    alternative = Submission("einsum", "")
    assert stock_differs_by_rule(mistake, "test_scores", 4.0, 0.0) == STOCK_RULES["judged"]
    assert stock_differs_by_rule(in_place, "test_softmax_values", 0.0, 4.0) == STOCK_RULES["in place"]
    assert stock_differs_by_rule(mistake, "test_scores", 0.0, 4.0) is None  # the course gives points stock does not
    assert stock_differs_by_rule(mistake, "test_other", 4.0, 0.0) is None  # a cell the mistake must keep
    assert stock_differs_by_rule(alternative, "test_scores", 0.0, 4.0) is None
    assert stock_differs_by_rule(in_place, "test_softmax_values", 4.0, 0.0) is None
    assert stock_differs_by_rule(None, "test_scores", 4.0, 0.0) is None  # complete and blank: always identical


def test_the_benchs_floor_renders_a_figure_shown_as_a_kernel_renders_it(tmp_path):
    """The floor of ``make bench`` is a notebook's own work, figures included: the course's ``show()`` displays a
    figure and closes it, which a kernel's inline backend renders to PNG, and so must the floor's shell (a plain
    shell prints the figure's repr and draws nothing: the floor left out every figure of the course)."""
    import os
    import subprocess
    import sys

    from attention_course.grading.course import ROOT
    from tools.bench import FLOOR

    folder = tmp_path / "student" / "01"
    folder.mkdir(parents=True)
    cell = nbformat.v4.new_code_cell(
        "import matplotlib.artist, matplotlib.pyplot as plt\n"
        "from attention_course.plotting import show\n"
        "class Drawn(matplotlib.artist.Artist):\n"
        "    def draw(self, renderer):\n"
        "        open('drawn', 'a').write('x')\n"
        "fig, ax = plt.subplots()\n"
        "ax.add_artist(Drawn())\n"
        "show(alt='a figure that says when it is drawn', fig=fig)\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), folder / "nb.ipynb")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", FLOOR, str(folder / "nb.ipynb")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (folder / "drawn").is_file(), "the floor did not render the figure show() displayed"


def test_a_scratch_worker_leaves_the_gradebook_steps_to_the_one_writer():
    """A worker grading in a scratch course (Dask, the grading service) runs the steps that change the notebook;
    the steps that only write the gradebook run once, where its one writer records the hand-in
    (``cluster.record``), not twice."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, LimitOutput, SaveAutoGrades

    from attention_course.grading.judging.executor import JudgedExecute
    from attention_course.grading.nbgrader_glue.handgrades import KeepHandGrades
    from attention_course.grading.nbgrader_glue.term import ApplyTerm
    from attention_course.grading.run.worker import recording_step

    assert all(recording_step(s) for s in (SaveAutoGrades, AssignLatePenalties, KeepHandGrades, ApplyTerm))
    assert not any(recording_step(s) for s in (JudgedExecute, ClearMetadataPreprocessor, LimitOutput,
                                                CheckCellMetadata))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="making users needs root and useradd")
def test_a_user_that_cannot_be_removed_is_named_not_left_behind_silently():
    """userdel refuses while another holds the lock on /etc/passwd (as a useradd of a parallel test may): the class's
    removal tries again, and names what it could not remove instead of leaving the account behind in silence."""
    name = f"attn-left-{os.getpid()}"
    make_users([name])  # (waits while another useradd holds the lock)
    lock = Path("/etc/passwd.lock")
    try:
        try:
            lock.write_text(f"{os.getpid()}\n")  # shadow's own lock file: held by this live process
            with pytest.raises(UsersNotRemoved, match=rf"{name} \(.*lock"):
                remove_users([name], tries=2)
        finally:
            lock.unlink(missing_ok=True)
        pwd.getpwnam(name)  # still there, as said
    finally:
        remove_users([name])
    with pytest.raises(KeyError):
        pwd.getpwnam(name)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="making users needs root and useradd")
def test_a_user_is_never_given_a_home_that_was_there_before(tmp_path):
    """useradd only warns when the home is there already (a former user's): the user would live in a folder not
    hers. make_users refuses before making anyone, and leaves that folder as it was."""
    name = f"attn-home-{os.getpid()}"
    home = Path("/home") / name
    home.mkdir(mode=0o755)
    try:
        with pytest.raises(UsageError, match="is there already"):
            make_users([name])
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
        assert home.is_dir() and home.stat().st_uid == 0
    finally:
        remove_users([name], keep_home={name})  # (only if one was made after all)
        shutil.rmtree(home, ignore_errors=True)


def test_the_class_memory_watch_sees_a_peak_between_two_of_its_readings():
    """The graded class's memory watch (harness.PeakMemory, read by test_security's memory bound) reads each process's
    high-water mark: a child that holds 300 MiB for 50 ms, between two of its readings half a second apart, then lets
    it go and lives on, is seen at its peak (a reading of the resident size then would miss it nine times in ten). The
    watch runs in a Python of its own, whose only child is that one (this process may have started others)."""
    import json
    import subprocess
    import sys

    size = 300 * 2**20
    child = f"import time\nb = b'x' * {size}\ntime.sleep(0.05)\ndel b\ntime.sleep(1.2)"
    tests = Path(__file__).parent
    watcher = (f"import json, subprocess, sys\nsys.path[:0] = [{str(tests)!r}, {str(tests.parent)!r}]\n"
               "from harness import PeakMemory\nwatch = PeakMemory()\nwatch.start()\n"
               f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\nwatch.stop.set()\nwatch.join()\n"
               "print(json.dumps([watch.peak, watch.who.decode(errors='replace')]))")
    proc = subprocess.run([sys.executable, "-c", watcher], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak, who = json.loads(proc.stdout.strip().splitlines()[-1])
    assert peak >= size, f"the watch saw {peak / 2**20:.0f} MiB at most ({who!r})"
    assert "time.sleep" in who, who
