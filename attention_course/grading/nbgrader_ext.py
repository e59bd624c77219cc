"""nbgrader preprocessors this course adds to the stock pipeline.

``ReleaseStarterCode``
    A master notebook may carry *starter code* that students receive as-is,
    bugs included, inside a solution cell::

        ### BEGIN STARTER
        # V = X @ W_q + b_q
        ### END STARTER

    In the master the lines are comments (the master runs the solution only).
    In the release they are uncommented; in the solutions they are dropped.

``HideHiddenTests``
    Feedback shows each grade cell's visible tests and the message of the
    first failed check, but neither hidden-test source nor a traceback
    (tracebacks quote the hidden lines they pass through).
"""

from __future__ import annotations

import json
import os
import re

from nbgrader import utils
from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import GetGrades, NbGraderPreprocessor
from traitlets import Bool, List

from . import nbgrader_patches, trust

BEGIN_STARTER = "### BEGIN STARTER"
END_STARTER = "### END STARTER"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
HIDDEN_PLACEHOLDER = "# (hidden tests ran here; their source is not shown)"
#: The course's nbconvert templates (the feedback page), searched before nbgrader's own.
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


nbgrader_patches.install()


def replace_blocks(source: str, begin: str, end: str, keep) -> str:
    """Replace every ``begin``/``end`` block of ``source``.

    ``keep(lines, indent)`` receives the lines strictly inside a block and the
    indentation of its ``begin`` line, and returns the lines to put in its
    place. Raises ``ValueError`` on an unclosed or nested block.
    """
    out, block, indent = [], None, ""
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped.startswith(begin):
            if block is not None:
                raise ValueError(f"nested '{begin}' block")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped.startswith(end):
            if block is None:
                raise ValueError(f"'{end}' without '{begin}'")
            out.extend(keep(block, indent))
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"'{begin}' block is not closed")
    return "\n".join(out)


def uncomment(lines: list[str], indent: str) -> list[str]:
    """Remove one level of ``# `` from each commented line of a starter block."""
    result = []
    for line in lines:
        body = line[len(indent):] if line.startswith(indent) else line.lstrip()
        if body.startswith("# "):
            body = body[2:]
        elif body.startswith("#"):
            body = body[1:]
        result.append(indent + body if body else "")
    return result


class ReleaseStarterCode(NbGraderPreprocessor):
    """Turn ``### BEGIN STARTER`` blocks into code (release) or drop them (solutions)."""

    keep = Bool(True, help="Uncomment starter blocks (release); if False, remove them (solutions).").tag(
        config=True
    )

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and BEGIN_STARTER in cell.source:
            cell.source = replace_blocks(
                cell.source, BEGIN_STARTER, END_STARTER, uncomment if self.keep else (lambda lines, indent: [])
            )
        return cell, resources


class QuietTestCells(NbGraderPreprocessor):
    """In the release, a test cell whose hidden tests were removed may hold nothing but its opening
    docstring, which Jupyter would echo as the cell's result (``Out[n]``) and nbgrader's Validate would
    try to read as a score. Such a docstring becomes a comment; the gradebook keeps the cell as written."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell):
            cell.source = quiet_docstring(cell.source)
        return cell, resources


def quiet_docstring(source: str) -> str:
    """``source`` with its opening docstring turned into comments when it is the cell's last statement."""
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return source
    last = body[-1] if body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Constant) and isinstance(last.value.value, str)
            and last is body[0]):
        return source
    lines = source.split("\n")
    text = [f"# {line}".rstrip() for line in last.value.value.strip().split("\n")]
    return "\n".join(lines[: last.lineno - 1] + text + lines[last.end_lineno:])


class DropStarterCode(ReleaseStarterCode):
    """The solutions' variant of :class:`ReleaseStarterCode`: starter blocks are removed."""

    keep = Bool(False).tag(config=True)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class HideHiddenTests(NbGraderPreprocessor):
    """Feedback that leaks nothing: no hidden-test source, no traceback, no autograde-time output.

    Grade cells keep their visible tests and the one-line message of a failed check. Every other
    code cell shows the outputs the student's own submitted notebook had (matched by source),
    never what ran at autograde, where the student's code might have printed what it was sent.
    """

    # The HTML exporter hands this option to every preprocessor it runs.
    display_data_priority = List(["text/html", "image/png", "text/plain"]).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        self._submitted = submitted_outputs(info.get("student"), info.get("assignment"), info.get("notebook"))
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if not utils.is_grade(cell):
            queue = self._submitted.get(cell.source)
            cell.outputs = trust.inert_outputs(queue.pop(0) if queue else [])
            return cell, resources
        if BEGIN_HIDDEN in cell.source:
            cell.source = replace_blocks(
                cell.source, BEGIN_HIDDEN, END_HIDDEN, lambda lines, indent: [indent + HIDDEN_PLACEHOLDER]
            )
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                message = _ANSI.sub("", f"{output.get('ename', 'Error')}: {output.get('evalue', '')}")
                output["traceback"] = [message]
                kept.append(output)
        cell.outputs = kept
        return cell, resources


#: Feedback styling of this course: a failed check's message (one long line, with the misconception
#: named at its end) wraps within the page instead of running past its right edge.
FEEDBACK_CSS = """
div.output_area pre, div.output_subarea pre, div.output_error pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}
div.output_subarea { max-width: 100%; overflow-x: visible; }
"""


class FeedbackStyle(Preprocessor):
    """Add the course's CSS (``FEEDBACK_CSS``) to the styles nbconvert inlines into each feedback page.
    Runs after nbconvert's ``CSSHTMLHeaderPreprocessor``, which collects them. (A plain nbconvert
    preprocessor: nbgrader's base class would reject the exporter's display settings with a warning.)"""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(FEEDBACK_CSS)
        return nb, resources


class InertContent(Preprocessor):
    """Student content as a page may show it, in every page rendered from a notebook (the Formgrader's
    submission view, the feedback pages): code cells' outputs as :func:`.trust.inert_outputs` allows them (text
    and raster images), Markdown cells' attachments as :func:`.trust.inert_markdown_cell` does. (The HTML that
    Markdown becomes is sanitised by :func:`.trust.clean_html`, nbconvert's ``clean_html`` filter.)"""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.outputs = trust.inert_outputs(cell.get("outputs", []))
        elif cell.cell_type == "markdown":
            trust.inert_markdown_cell(cell)
        return cell, resources


class GetGradesShowPending(GetGrades):
    """nbgrader's ``GetGrades``, except that a cell still waiting for a grader (a written answer no one has
    scored) gets ``score = None`` instead of the gradebook's 0, so that its feedback says "not graded yet"."""

    def _get_score(self, cell, resources):
        super()._get_score(cell, resources)
        grade = self.gradebook.find_grade(
            cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id, self.student_id)
        if grade.needs_manual_grade:
            cell.metadata.nbgrader["score"] = None


def submitted_outputs(student, assignment, notebook) -> dict:
    """Outputs of the code cells of a submitted notebook, by source (empty if it cannot be read).

    Read with nbformat, so that outputs stored as lists of lines (as every notebook file keeps them)
    come back as the strings the HTML exporter shows."""
    import nbformat

    found: dict = {}
    if not (student and assignment and notebook):
        return found
    path = os.path.join("submitted", student, assignment, f"{notebook}.ipynb")
    try:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.get("cell_type") == "code":
                outputs = [o for o in cell.get("outputs", []) if isinstance(o, dict)]
                found.setdefault(cell.source, []).append(outputs)
    except Exception:  # whatever is wrong with the hand-in, its feedback shows no old outputs
        return {}
    return found


def master_order(assignment: str, notebook: str, names: list[str]) -> list[str]:
    """``names`` (gradebook cells) in the order of the master notebook in ``source/``, where it can be read;
    cells the master does not hold keep their gradebook place after their predecessor."""
    try:
        with open(os.path.join("source", assignment, f"{notebook}.ipynb"), encoding="utf-8") as f:
            master = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in json.load(f)["cells"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return list(names)
    known = set(names)
    ordered = [n for n in master if n in known]
    for i, name in enumerate(names):
        if name not in ordered:
            before = next((names[j] for j in range(i - 1, -1, -1) if names[j] in ordered), None)
            ordered.insert(ordered.index(before) + 1 if before else 0, name)
    return list(dict.fromkeys(ordered))


def keep_attachments(new, cell) -> None:
    """A student's Markdown cell keeps its pasted images (:func:`.trust.inert_attachments`), nothing else."""
    from nbformat import NotebookNode

    kept = trust.inert_attachments(cell.get("attachments"))
    if kept:
        new.attachments = NotebookNode(kept)


class TrustGradebook(NbGraderPreprocessor):
    """Rebuild a submission's cells from the gradebook before autograde; trust none of its metadata.

    A cell whose ``grade_id`` names a gradebook cell (first occurrence only) gets that cell's
    metadata (grade flag, points, lock) from the gradebook, and, when locked, its source too.
    Every other cell becomes a plain student cell: its nbgrader metadata, tags (such as
    ``skip-execution``) and outputs are dropped. The gradebook cells stand in the master's order
    (missing ones put back); each plain cell follows the gradebook cell it followed in the hand-in,
    so no moving, duplicating or deleting of cells changes what runs before a test. The kernel is
    always the course's.
    """

    def preprocess(self, nb, resources):
        from nbformat import NotebookNode
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            notebook = gb.find_notebook(info["notebook"], info["assignment"])
            source = {c.name: (c.cell_type, c.source, bool(c.locked), c.checksum) for c in notebook.source_cells}
            order = [c.name for c in notebook.source_cells]
            points = {c.name: c.max_score for c in notebook.grade_cells}
            points.update({c.name: c.max_score for c in notebook.task_cells})
            solutions = {c.name for c in notebook.solution_cells}
            tasks = {c.name for c in notebook.task_cells}

        def trusted(name, cell=None):
            cell_type, src, locked, checksum = source[name]
            if cell is not None and not locked:
                text = cell.get("source", "")
                src = "".join(text) if isinstance(text, list) else str(text)
            md = {"grade": name in points and name not in tasks, "grade_id": name, "locked": locked,
                  "solution": name in solutions, "schema_version": 3, "cell_type": cell_type}
            if name in points:
                md["points"] = points[name]
            if name in tasks:
                md["task"] = True
            if checksum:
                md["checksum"] = checksum
            new = NotebookNode(cell_type=cell_type, metadata=NotebookNode(nbgrader=NotebookNode(md)), source=src)
            if cell_type == "code":
                new.outputs, new.execution_count = [], None
            elif cell_type == "markdown" and cell is not None and not locked:
                keep_attachments(new, cell)
            return new

        def plain(cell):
            kind = cell.get("cell_type") if cell.get("cell_type") in ("code", "markdown", "raw") else "raw"
            text = cell.get("source", "")
            new = NotebookNode(cell_type=kind, metadata=NotebookNode(),
                               source="".join(text) if isinstance(text, list) else str(text))
            if kind == "code":
                new.outputs, new.execution_count = [], None
            elif kind == "markdown":
                keep_attachments(new, cell)
            return new

        # The master's order, wherever the hand-in put (or duplicated) its cells: each gradebook cell at
        # its master position, the student's other cells after the gradebook cell they followed.
        order = master_order(info["assignment"], info["notebook"], order)
        placed, after = {}, {None: []}
        anchor = None
        for cell in nb.get("cells", []):
            md = cell.get("metadata", {}).get("nbgrader", {})
            name = md.get("grade_id") if isinstance(md, dict) else None
            if isinstance(name, str) and name in source and name not in placed:
                placed[name] = cell
                anchor = name
            else:
                after.setdefault(anchor, []).append(plain(cell))
        cells = list(after[None])
        for name in order:
            if name not in placed:
                self.log.warning("%s: cell %s was missing and is put back", info["student"], name)
            cells.append(trusted(name, placed.get(name)))
            cells.extend(after.get(name, []))
        nb.cells = cells
        for cell in nb.cells:
            cell.pop("id", None)
        nb.nbformat, nb.nbformat_minor = 4, 4
        nb.metadata = NotebookNode(kernelspec=NotebookNode(name="python3", display_name="Python 3", language="python"),
                                   language_info=NotebookNode(name="python"))
        return nb, resources
