"""Rules for the authors of test cells, read from the master notebooks (no kernel, no nbgrader: make check).

Rule 1: an expected value is never computed from what the student returned. In a test cell, a name bound
from a call of a student's function (or from such a name) is *the student's*; it may be the ``actual``
argument of ``assert_close`` but never appear in its ``expected`` argument or in a ``mistakes`` value: a
reference built from the student's own output passes a wrong answer that is consistent with itself, and
fails a correct one of another type (a tensor handed to a NumPy reference).

Exceptions are written where they stand, with their reason, as a comment ``# rule 1: <why>`` on the lines of
the assignment or the ``assert_close`` (``grep -rn "# rule 1:" source/`` lists them): an exact property that
relates two of the student's outputs (equivariance, a future that cannot leak), or a helper that receives the
student's module only to load the test's own weights into it.
Allowed on purpose: ``closest_(got, make)`` picks which of two fixed references (two valid conventions)
a result is nearest to; the reference itself is still computed from the test's own inputs.
"""

from __future__ import annotations

import ast

import pytest
from harness import masters

from attention_course.grading.cells import hidden_lines, python_source
from attention_course.grading.course import available

#: The comment that marks a documented exception on the lines of an assignment or an ``assert_close``.
MARK = "# rule 1:"
#: Calls whose result is a choice between references made from the test's own inputs (see the docstring).
CHOOSERS = {"closest_"}


def student_functions(nb: dict) -> set[str]:
    """The names the master's unlocked code cells define: the student's functions, classes and results."""
    names = set()
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and not meta.get("locked"):
            tree = ast.parse(python_source("".join(cell["source"])))
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Assign):
                    names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def grade_cells(nb: dict):
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
            yield meta["grade_id"], python_source("".join(cell["source"]))


def names_in(node) -> set[str]:
    """The free names an expression reads (not those its comprehensions and lambdas bind themselves)."""
    local = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            local |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        elif isinstance(n, ast.Lambda):
            local |= {a.arg for a in ast.walk(n.args) if isinstance(a, ast.arg)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local


class References(ast.NodeVisitor):
    """Walks a test cell in order, knowing at each statement which names hold the student's output."""

    def __init__(self, student: set[str], source: str):
        self.student, self.tainted, self.found, self.lines = student, set(student) - {"_"}, [], set()
        self.lines_of = [""] + source.split("\n")

    def uses(self, node) -> set[str]:
        return names_in(node) & self.tainted

    def excepted(self, node) -> bool:
        """A statement whose lines carry ``# rule 1: <reason>`` (a documented exception)."""
        first = getattr(node, "lineno", None)
        return first is not None and any(MARK in self.lines_of[i] for i in range(first, (node.end_lineno or first) + 1))

    def bind(self, target, value):
        clean = (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in CHOOSERS)
        clean = clean or self.excepted(value)
        dirty = not clean and bool(self.uses(value))
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                (self.tainted.add if dirty else self.tainted.discard)(n.id)

    def visit_Assign(self, node):
        self.visit(node.value)
        for t in node.targets:
            self.bind(t, node.value)

    def visit_AugAssign(self, node):
        self.visit(node.value)
        if self.uses(node.value):
            self.bind(node.target, node.value)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
            self.bind(node.target, node.value)

    def bind_loop(self, target, iterable):
        """A loop over a literal list of tuples binds each target name to its own column."""
        rows = iterable.elts if isinstance(iterable, (ast.Tuple, ast.List)) else None
        if (isinstance(target, ast.Tuple) and rows
                and all(isinstance(r, ast.Tuple) and len(r.elts) == len(target.elts) for r in rows)):
            for i, t in enumerate(target.elts):
                self.bind(t, ast.Tuple(elts=[r.elts[i] for r in rows], ctx=ast.Load()))
        else:
            self.bind(target, iterable)

    def visit_For(self, node):
        self.visit(node.iter)
        for _ in range(2):  # twice: what one iteration binds reaches the next
            self.bind_loop(node.target, node.iter)
            for stmt in node.body:
                self.visit(stmt)
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_FunctionDef(self, node):
        own = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        own |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if (names_in(node) - own) & self.tainted:  # a helper that calls the student's code: its results are theirs
            self.tainted.add(node.name)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "assert_close" and not self.excepted(node):
            references = node.args[1:2] + [k.value for k in node.keywords if k.arg == "expected"]
            for k in node.keywords:
                if k.arg == "mistakes" and isinstance(k.value, ast.Dict):
                    references += k.value.values
            for ref in references:
                if (used := self.uses(ref)) and ref.lineno not in self.lines:
                    self.lines.add(ref.lineno)
                    self.found.append(f"line {ref.lineno}: {ast.unparse(ref)[:100]}  (uses {sorted(used)})")


def tainted_references(source: str, student: set[str]) -> list[str]:
    """Where a reference value (``assert_close``'s expected, a ``mistakes`` value) uses the student's output."""
    visitor = References(student, source)
    visitor.visit(ast.parse(source))
    return visitor.found


@pytest.mark.parametrize("assignment", available())
def test_no_expected_value_is_computed_from_what_the_student_returned(assignment):
    for name, nb in masters(assignment).items():
        student = student_functions(nb)
        bad = {grade_id: where for grade_id, source in grade_cells(nb)
               if (where := tainted_references(source, student))}
        assert not bad, (f"{name}: reference values computed from the student's output (rule 1 of "
                         f"tests/test_authoring.py):\n" + "\n".join(f"  {g}: {w}" for g, ws in bad.items() for w in ws))


@pytest.mark.parametrize("assignment", available())
def test_timings_hold_linear_algebra_to_one_thread(assignment):
    """A notebook that plots timings (time.perf_counter) holds NumPy's and PyTorch's linear algebra to one thread
    around them (threadpoolctl's ``threadpool_limits(limits=1)``): on the course's small matrices threads cost more
    than they save, and the figure would show them (a student's 06: 11-15 ms per token with the default threads,
    0.3 ms with one; here, on a busy 2-core machine, 0.45 ms against 0.16 ms at the end of the sequence)."""
    for name, nb in masters(assignment).items():
        sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        if any("perf_counter()" in s for s in sources):
            assert any("with threadpool_limits(limits=1):" in s for s in sources), \
                f"{name} times code without holding linear algebra to one thread (threadpool_limits(limits=1))"


def tolerances_used(source: str) -> set[str]:
    """The literal tolerances a test cell passes (``rtol=1e-3``, ``atol=1e-2``; 0 is no tolerance), as written."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg in ("rtol", "atol") and isinstance(node.value, ast.Constant):
            if node.value.value:
                used.add(ast.get_source_segment(source, node.value))
    return used


@pytest.mark.parametrize("assignment", available())
def test_every_tolerance_a_test_uses_is_stated_to_students(assignment):
    """A tolerance written in a test cell appears in the notebook's own text, so that a student reads the number
    that grades her before a check prints it."""
    for name, nb in masters(assignment).items():
        text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        unstated = {f"{grade_id}: {tol}" for grade_id, source in grade_cells(nb) for tol in tolerances_used(source)
                    if f"`{tol}`" not in text and f"= {tol}" not in text}
        assert not unstated, f"{name}: tolerances used but never stated in the text: {sorted(unstated)}"


def test_the_tolerance_rule_can_fail():
    assert tolerances_used("assert_close(a, b, rtol=1e-3, atol=0)\nassert_close(a, b, atol=TOL)") == {"1e-3"}


def reread_after_call(source: str, student: set[str]) -> list[str]:
    """Visible calls of a student's function (not through ``call_unchanged``) that pass a name the cell reads again
    after the call: under Validate an in-place change would reach the reference and read as wrong values."""
    tree = ast.parse(source)
    hidden = hidden_lines(source)
    loads = [(n.lineno, n.col_offset, n.id) for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in student
                and node.func.id[0].islower() and node.lineno not in hidden):
            passed = {a.id for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Name)}
            again = sorted({name for line, col, name in loads if (line, col) > (node.end_lineno, node.end_col_offset)
                            and name in passed})
            if again:
                found.append(f"line {node.lineno}: {node.func.id}(...) then reads {', '.join(again)}")
    return found


@pytest.mark.parametrize("assignment", available())
def test_visible_checks_see_an_in_place_change_before_reading_an_argument_again(assignment):
    """Rule 3: a visible check that reads an argument again after calling the student's function (for a reference,
    a second call) makes the call with ``call_unchanged``, which names an in-place change as one."""
    for name, nb in masters(assignment).items():
        student = student_functions(nb)
        found = {grade_id: hits for grade_id, source in grade_cells(nb) if (hits := reread_after_call(source, student))}
        assert not found, f"{name}: call these through call_unchanged(f, ...): {found}"


def test_the_in_place_rule_can_fail():
    source = "o_ = attention(Q_, K_)\nassert_close(o_, ref_(Q_, K_))\n### BEGIN HIDDEN TESTS\nx_ = attention(Q_, K_)\nQ_\n"
    assert reread_after_call(source, {"attention"}) == ["line 1: attention(...) then reads K_, Q_"]
    assert reread_after_call(source.replace("attention(Q_", "call_unchanged(attention, Q_", 1), {"attention"}) == []
