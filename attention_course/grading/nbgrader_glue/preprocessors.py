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

import functools
import os
import re
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.exporters.templateexporter import TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.preprocessors import GetGrades, NbGraderPreprocessor
from traitlets import Bool, Integer, List

from .. import trust
from ..cells import BEGIN_HIDDEN, BEGIN_STARTER, END_HIDDEN, END_STARTER, check_summary, quiet_docstring, replace_blocks, uncomment
from .gradebook import master_cells, notebook_cells
from .page_cap import MAX_PAGE_BYTES, cap_page
from .regrade import changes_of
from .term import Term, deadline_sentences, late_words

HIDDEN_PLACEHOLDER = "# (hidden tests ran here; their source is not shown)"
#: The course's nbconvert templates (the feedback page, the solutions' pages), searched before nbgrader's own.
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
#: The pygments style of code in every page: each colour at least 4.5:1 against its background (accessible-pygments)
CODE_STYLE = "a11y-light"


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


class DropStarterCode(ReleaseStarterCode):
    """The solutions' variant of :class:`ReleaseStarterCode`: starter blocks are removed."""

    keep = Bool(False).tag(config=True)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class HideHiddenTests(NbGraderPreprocessor):
    """Feedback that leaks nothing: no hidden-test source, no traceback, no autograde-time output.

    Grade cells keep their visible tests, the one-line message of a failed check and the grader's notes (an
    argument changed in place, which costs no points). Every other
    code cell shows the outputs the student's own submitted notebook had (matched by source),
    never what ran at autograde, where the student's code might have printed what it was sent. The hand-in's content
    stays within ``max_page_bytes`` of HTML (:func:`.page_cap.cap_page`).
    """

    # The HTML exporter hands this option to every preprocessor it runs.
    display_data_priority = List(["text/html", "image/png", "text/plain"]).tag(config=True)
    max_page_bytes = Integer(MAX_PAGE_BYTES, help="The most HTML a feedback page gives a hand-in's code, text and "
                             "outputs (the outputs put back here come after InertContent's cap); the rest is cut, with "
                             "a note.").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        self._submitted = submitted_outputs(info.get("student"), info.get("assignment"), info.get("notebook"))
        nb, resources = super().preprocess(nb, resources)
        cap_page(nb, self.max_page_bytes)
        return nb, resources

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
            elif output.get("output_type") == "display_data" and output.get("metadata", {}).get(trust.GRADER_NOTE) is True:
                # the grader's note on the cell (an argument changed in place)
                kept.extend(trust.inert_outputs([output]))
        cell.outputs = kept
        return cell, resources


#: Code cells longer than this are highlighted afresh each time (a class's pages repeat short instructor cells)
_CACHED_SOURCE_CHARS = 8000


@functools.lru_cache(maxsize=512)
def _highlighted(source: str, language: str, magics: str | None, options: tuple) -> str:
    return Highlight2HTML(extra_formatter_options=dict(options))(source, language, {"magics_language": magics}
                                                                   if magics else None)


class CachedHighlight:
    """nbconvert's ``Highlight2HTML`` (the ``highlight_code`` filter), remembering the HTML of a short cell: the pages
    of a class show the same instructor cells again and again, and highlighting was 40% of a feedback page."""

    def __init__(self, highlighter):
        self.highlighter = highlighter

    def __call__(self, source, language=None, metadata=None):
        options = tuple(sorted(self.highlighter.extra_formatter_options.items()))
        try:
            hash(options)
        except TypeError:  # an option that is a list or a dict: no cache
            options = None
        if options is None or len(source) > _CACHED_SOURCE_CHARS:
            return self.highlighter(source, language, metadata)
        return _highlighted(source, language or self.highlighter.pygments_lexer, (metadata or {}).get("magics_language"),
                            options)


class PageExporter(HTMLExporter):
    """nbconvert's HTML exporter without its last step, which parses every finished page again with BeautifulSoup
    to give an <img> without one an ``alt`` and JupyterLab-template cells a ``tabindex``: the course's templates
    (classic, course/page.html.j2) give every image its text alternative themselves and have no JupyterLab cells,
    and that second parse was half of the time of a feedback page. Used for the feedback pages
    (``GenerateFeedback.exporter_class``) and the solutions' pages; the rest is nbconvert's ``from_notebook_node``."""

    def from_notebook_node(self, nb, resources=None, **kw):
        info = nb.metadata.get("language_info", {})
        lexer = info.get("pygments_lexer", info.get("name", None))
        self.register_filter("highlight_code", self.filters.get("highlight_code", CachedHighlight(
            Highlight2HTML(pygments_lexer=lexer, parent=self))))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                                       resources=resources))
        return TemplateExporter.from_notebook_node(self, nb, resources, **kw)


class InertContent(Preprocessor):
    """Student content as a page may show it, in every page rendered from a notebook (the Formgrader's
    submission view, the feedback pages): code cells' outputs as :func:`.trust.inert_outputs` allows them (text
    and raster images), Markdown cells' attachments as :func:`.trust.inert_markdown_cell` does (the HTML that
    Markdown becomes is sanitised by :func:`.trust.clean_html`, nbconvert's ``clean_html`` filter), and all of the
    hand-in's content within ``max_page_bytes`` of HTML, with a note where the cut begins (:func:`.page_cap.cap_page`)."""

    enabled = Bool(True).tag(config=True)
    max_page_bytes = Integer(MAX_PAGE_BYTES, help="The most HTML a page gives a hand-in's code, text and outputs (the "
                             "template and the master's cells come on top); the rest is cut, with a note.").tag(config=True)

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        cap_page(nb, self.max_page_bytes)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.outputs = trust.inert_outputs(cell.get("outputs", []))
        elif cell.cell_type == "markdown":
            trust.inert_markdown_cell(cell)
        return cell, resources


class GetGradesShowPending(GetGrades):
    """nbgrader's ``GetGrades``, except that a cell still waiting for a grader (a written answer no one has
    scored) gets ``score = None`` instead of the gradebook's 0, so that its feedback says "not graded yet"."""

    def preprocess(self, nb, resources):
        """GetGrades, with the late penalty of the course's policy on the notebook's score as it is now (written
        answers graded by hand after autograde count) and how late the hand-in was, in words."""
        nb, resources = super().preprocess(nb, resources)
        info, term = resources["nbgrader"], Term(parent=self)
        with Gradebook(self.db_url) as gb:
            submission = gb.find_submission(self.assignment_id, self.student_id)
            late = term.seconds_late(submission)
            notebook = gb.find_submission_notebook(self.notebook_id, self.assignment_id, self.student_id)
            info["late_penalty"] = term.penalty(notebook.score, late)
            info["score"] = notebook.score - info["late_penalty"]
            info["late_text"] = late_words(late)
            info["due_dates"] = deadline_sentences(term, submission)  # due date, her own deadline
            # what a later run changed in this hand-in's score, as a sentence each (regrade.py)
            info["regrades"] = changes_of(gb, submission)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        """GetGrades' step, and a test cell's label for the page's summary: its docstring's first line (the cell's
        source comes from the gradebook, never the hand-in)."""
        cell, resources = super().preprocess_cell(cell, resources, index)
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            meta["label"] = check_summary(cell.source, limit=100)
        return cell, resources

    def _get_score(self, cell, resources):  # GetGrades._get_score, in one query of the gradebook instead of two
        grade = self.gradebook.find_grade(
            cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id, self.student_id)
        cell.metadata.nbgrader["score"] = None if grade.needs_manual_grade else grade.score
        cell.metadata.nbgrader["points"] = grade.max_score


def submitted_outputs(student, assignment, notebook) -> dict:
    """Outputs of the code cells of a submitted notebook, by source (empty if it cannot be read).

    Read with nbformat, so that outputs stored as lists of lines (as every notebook file keeps them)
    come back as the strings the HTML exporter shows."""
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


class StaleTests(RuntimeError):
    """The gradebook's tests of a notebook are not the master's: an instructor's matter, never a student's grade."""


class TrustGradebook(NbGraderPreprocessor):
    """nbgrader's sanitize step, replaced: a hand-in's cells rebuilt from the gradebook by
    :func:`.trust.rebuilt_cells`, in the master's order (:func:`.trust.master_order`); its notebook metadata
    dropped, so the kernel is always the course's. A notebook whose gradebook tests or points differ from the master
    in ``source/`` is not graded at all (:func:`.trust.tests_as_in_source`)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            cells, order = notebook_cells(gb.find_notebook(info["notebook"], info["assignment"]))
        stale = trust.tests_as_in_source(master_cells(Path("."), info["assignment"], info["notebook"]), cells)
        if stale:
            raise StaleTests(
                f"the gradebook's copy of {info['assignment']}/{info['notebook']} is not source/'s "
                f"({'; '.join(stale[:3])}{'; ...' if len(stale) > 3 else ''}): nothing is graded with it. "
                "`make release` puts source/'s tests into the gradebook (`make autograde` does it itself), then "
                "`make autograde` grades again the hand-ins it changes")
        order = trust.master_order(".", info["assignment"], info["notebook"], order)
        nb.cells = trust.rebuilt_cells(nb.get("cells", []), cells, order, missing=lambda name: self.log.warning(
            "%s: cell %s was missing and is put back", info["student"], name))
        nb.nbformat, nb.nbformat_minor = 4, 4
        nb.metadata = NotebookNode(kernelspec=NotebookNode(name="python3", display_name="Python 3", language="python"),
                                   language_info=NotebookNode(name="python"))
        return nb, resources
