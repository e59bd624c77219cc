"""Grading written answers by hand: a mark scheme for every answer, shown beside it, one question at a time.

A written answer's master cell holds, inside its solution region, the model answer and the mark scheme::

    ### BEGIN SOLUTION
    The model answer, as a student would write it.
    ### BEGIN MARK SCHEME
    - **2**: what earns these two points
      - **1**: what earns part of them instead (a partial line: its parent's points or its own, never both)
    - **1**: what earns this one
    ### END MARK SCHEME
    ### END SOLUTION

The release never shows either (``ClearSolutions`` replaces the whole region); the posted solutions show the
model answer without the scheme (nbgrader's ``ClearMarkScheme``). A scheme's points add up to the cell's points
(:func:`problems`, checked for every master by ``make check``), and every line that gives points is a line of its own,
never a bracket in another's text: each is a tick on the question page.

Graders meet the scheme in two places of the Formgrader, both served by the instructor's Jupyter server:

* each submission's page shows, under every written answer, the marking guide (question, model answer, scheme)
  and a link to that question's page (:class:`ShowMarkScheme`, a preprocessor of the Formgrader's exporter);
* ``<server>/formgrader/questions`` lists every written question with how many answers still wait, and
  ``.../questions/<assignment>/<notebook>/<grade id>`` shows every hand-in's answer to one question, one after
  the other, with the scheme at the top, ticks that add up a score, and a comment box; scores and comments are
  saved through the Formgrader's own API (``/formgrader/api/grade`` and ``/comment``), so the gradebook keeps
  nbgrader's rules and the course's cap on manual scores. Answers are numbered as the Formgrader numbers its
  submissions and show no name. Student text passes the course's sanitiser (:func:`.trust.clean_html`) and the
  page's scripts carry a nonce that the page's Content-Security-Policy requires.
"""

from __future__ import annotations

import html
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_markdown_cell

from ..cells import cell_source, without_solution_markers
from ..trust import clean_html, inert_markdown_cell
from .mathml import typeset

BEGIN, END = "### BEGIN MARK SCHEME", "### END MARK SCHEME"
_ITEM = re.compile(r"^- \*\*(?P<points>\d+(?:\.\d+)?)\*\*:\s*(?P<text>.*)$")
_PARTIAL = re.compile(r"^\s+- \*\*(?P<points>\d+(?:\.\d+)?)\*\*:\s*(?P<text>.*)$")
#: Points given in a line's text (as "(1 point for ...)" or "lose 1 point") instead of on a line of their own.
_POINTS_IN_TEXT = re.compile(r"\(\s*\d+(?:\.\d+)?\s+points?\b|\blos(?:e|es|ing)\s+\d+(?:\.\d+)?\s+points?\b", re.I)


@dataclass(frozen=True)
class Question:
    """One written answer of a master: where it is, what it asks, and how it is marked."""

    assignment: str
    notebook: str
    grade_id: str
    points: float
    prompt: str  # the Markdown cell before the answer
    model: str  # the model answer (Markdown)
    items: tuple[tuple[float, str], ...]  # the mark scheme: (points, what earns them)
    partials: tuple[tuple[int, float, str], ...] = ()  # (the item it is part of, points, what earns them instead)

    @property
    def lines(self) -> list[tuple[float, str, int | None]]:
        """Every line of the scheme that gives points, in the scheme's order: (points, text, the item a partial line
        is part of, or None). A grader's ticks are indices into this list."""
        found: list[tuple[float, str, int | None]] = []
        for i, (points, text) in enumerate(self.items):
            found.append((points, text, None))
            found += [(p, t, i) for of, p, t in self.partials if of == i]
        return found


def split(source: str) -> tuple[str, tuple[tuple[float, str], ...], tuple[tuple[int, float, str], ...]]:
    """A written answer's master source as (model answer, mark scheme items, partial lines: (item, points, text))."""
    text = without_solution_markers(source)
    if BEGIN not in text:
        return text.strip(), (), ()
    model, rest = text.split(BEGIN, 1)
    scheme = rest.split(END, 1)[0]
    items: list[list] = []
    partials: list[list] = []
    last: list | None = None
    for line in scheme.splitlines():
        m, sub = _ITEM.match(line), _PARTIAL.match(line)
        if m:
            last = [float(m.group("points")), m.group("text").strip()]
            items.append(last)
        elif sub and items:
            last = [len(items) - 1, float(sub.group("points")), sub.group("text").strip()]
            partials.append(last)
        elif line.strip() and last is not None:  # a continuation line of the line above
            last[-1] += " " + line.strip()
    return (model.strip(), tuple((p, t) for p, t in items), tuple((i, p, t) for i, p, t in partials))


def written_cells(nb: dict):
    """(index, cell) of every written answer (a graded Markdown answer cell) of a notebook."""
    for i, cell in enumerate(nb.get("cells", [])):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "markdown" and meta.get("grade") and meta.get("solution"):
            yield i, cell


_MASTERS: dict[tuple, list[Question]] = {}


def questions(course: Path, assignment: str) -> list[Question]:
    """Every written answer of an assignment's masters (``source/<assignment>/*.ipynb``), in notebook order."""
    found = []
    for path in sorted((Path(course) / "source" / assignment).glob("*.ipynb")):
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _MASTERS:
            nb = json.loads(path.read_text(encoding="utf-8"))
            cells = nb.get("cells", [])
            one = []
            for i, cell in written_cells(nb):
                prompt = next((cell_source(c) for c in reversed(cells[:i]) if c.get("cell_type") == "markdown"), "")
                model, items, partials = split(cell_source(cell))
                meta = cell["metadata"]["nbgrader"]
                one.append(Question(assignment, path.stem, meta["grade_id"], float(meta.get("points", 0)),
                                    prompt.strip(), model, items, partials))
            _MASTERS[key] = one
        found.extend(_MASTERS[key])
    return found


def question(course: Path, assignment: str, notebook: str, grade_id: str) -> Question | None:
    return next((q for q in questions(course, assignment) if (q.notebook, q.grade_id) == (notebook, grade_id)), None)


def problems(q: Question) -> list[str]:
    """What is wrong with a question's mark scheme (nothing: an empty list)."""
    where = f"{q.assignment}/{q.notebook} {q.grade_id}"
    if not q.items:
        return [f"{where}: no mark scheme ({BEGIN} ... {END} inside the solution region)"]
    found = []
    total = sum(p for p, _ in q.items)
    if abs(total - q.points) > 1e-9:
        found.append(f"{where}: the mark scheme gives {total:g} points, the cell is worth {q.points:g}")
    found += [f"{where}: a mark scheme item without text" for _, t in q.items if not t]
    found += [f"{where}: a line gives points inside its text ({m.group(0).strip()}...): make it a partial line of its "
              f"own, indented under its item (  - **1**: what earns it), so that it is a tick"
              for _, t, _ in q.lines for m in [_POINTS_IN_TEXT.search(t)] if m]
    found += [f"{where}: a partial line gives {p:g} points, its item {q.items[i][0]:g}: a part gives less than the whole"
              for i, p, _ in q.partials if not 0 < p < q.items[i][0]]
    found += [f"{where}: a partial line without text" for _, _, t in q.partials if not t]
    if not q.model:
        found.append(f"{where}: no model answer")
    return found


#: The guide's link to a question page is written as this placeholder (the page's sanitiser keeps no relative
#: link) and made a link by the Formgrader's page writer (:func:`with_question_links`); the secret part is made
#: per server, so a student's text cannot produce one.
_LINK_TOKEN = secrets.token_hex(8)
_LINK = re.compile(rf"<code>{_LINK_TOKEN}:([\w.-]+)/([\w.-]+)/([\w.-]+)</code>")


def guide_markdown(q: Question) -> str:
    """The marking guide shown under a written answer in the Formgrader (Markdown)."""
    scheme = "\n".join(("  " if of is not None else "") + f"- **{p:g}**: {t}"
                       for p, t, of in q.lines) or "- (no mark scheme in the master)"
    return "\n\n".join([f"#### Marking guide: `{q.grade_id}` ({q.points:g} points; graders only)",
                         "**Model answer.**", q.model, f"**Mark scheme.**\n\n{scheme}",
                         f"`{_LINK_TOKEN}:{q.assignment}/{q.notebook}/{q.grade_id}`"])


def question_url(base_url: str, q: Question) -> str:
    return f"{base_url.rstrip('/')}/formgrader/questions/{q.assignment}/{q.notebook}/{q.grade_id}"


def with_question_links(page: str, base_url: str) -> str:
    """The Formgrader's page with each guide's placeholder made a link to that question's page."""
    def link(m: re.Match) -> str:
        a, nb, gid = (escape(x) for x in m.groups())
        return (f'<a class="marking" href="{escape(base_url.rstrip("/"))}/formgrader/questions/{a}/{nb}/{gid}">'
                f"Grade <code>{gid}</code> for every hand-in, answer after answer</a>")

    return _LINK.sub(link, page)


class ShowMarkScheme(Preprocessor):
    """In the Formgrader's submission page (and only there: its resources carry a ``submission_id``), a Markdown
    cell with the marking guide after every written answer. The guide comes from the master in ``source/``."""

    def preprocess(self, nb, resources):
        if not resources.get("submission_id"):
            return nb, resources

        root = self.config.get("CourseDirectory", {}).get("root")
        course = Path(root) if isinstance(root, str) and root else Path.cwd()
        assignment, notebook = resources.get("assignment_id"), resources.get("notebook_id")
        try:
            known = {q.grade_id: q for q in questions(course, assignment) if q.notebook == notebook}
        except (OSError, ValueError):
            return nb, resources
        cells = []
        for cell in nb.cells:
            cells.append(cell)
            meta = cell.get("metadata", {}).get("nbgrader", {})
            q = known.get(meta.get("grade_id")) if cell.cell_type == "markdown" and meta.get("solution") else None
            if q:
                cells.append(new_markdown_cell(guide_markdown(q)))
        nb.cells = cells
        return nb, resources


# -- the answers of a class -------------------------------------------------------------------------------------


def answer_html(cell: dict | None) -> str:
    """A student's written answer as safe HTML (:func:`markdown_html`), its kept images inline."""
    if cell is None:
        return "<p><em>No answer cell in this hand-in.</em></p>"

    cell = json.loads(json.dumps(cell))
    inert_markdown_cell(cell)
    source = cell_source(cell).strip()
    if not source or source == "YOUR ANSWER HERE":
        return "<p><em>Not answered (the release's placeholder is unchanged).</em></p>"
    for name, data in (cell.get("attachments") or {}).items():  # images kept by inert_markdown_cell, inline
        mime, b64 = next(iter(data.items()))
        source = source.replace(f"attachment:{name}", f"data:{mime};base64,{''.join(b64)}")
    return markdown_html(source)


def markdown_html(markdown: str) -> str:
    """Markdown as HTML with formulas as MathML, through the course's sanitiser (a student's text or the course's)."""
    return clean_html(markdown2html_mistune(typeset(markdown)))


def escape(text) -> str:
    return html.escape(str(text), quote=True)
