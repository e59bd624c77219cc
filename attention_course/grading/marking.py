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

from nbconvert.preprocessors import Preprocessor

from .cells import cell_source, without_solution_markers

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
        from nbformat.v4 import new_markdown_cell

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
_ANSWERS: dict[tuple, dict] = {}


def answer_sources(path: Path) -> dict[str, dict]:
    """``grade_id -> written answer cell`` of a graded notebook (cached while the file is unchanged)."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _ANSWERS:
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            nb = {}
        _ANSWERS.clear() if len(_ANSWERS) > 4096 else None
        _ANSWERS[key] = {c["metadata"]["nbgrader"].get("grade_id"): c for _, c in written_cells(nb)}
    return _ANSWERS[key]


def answer_html(cell: dict | None) -> str:
    """A student's written answer as safe HTML (:func:`markdown_html`), its kept images inline."""
    if cell is None:
        return "<p><em>No answer cell in this hand-in.</em></p>"
    from .trust import inert_markdown_cell

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
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from .mathml import typeset
    from .trust import clean_html

    return clean_html(markdown2html_mistune(typeset(markdown)))


def class_answers(gradebook, q: Question, indices: dict, notebook_path) -> list[dict]:
    """Every hand-in's answer to ``q``: number (the Formgrader's), ids, score, comment, ticks, the grade it had before
    its text changed (:mod:`.handgrades`) and the answer's HTML, in the Formgrader's order. ``indices``: submission
    id -> the Formgrader's index; ``notebook_path(student)``: the graded notebook's path."""
    from .handgrades import read_ticks, rows_for

    kept = rows_for(gradebook.db, gradebook.course_id, q.assignment, q.notebook, q.grade_id)
    rows = []
    for nb in gradebook.notebook_submissions(q.notebook, q.assignment):
        grade = next((g for g in nb.grades if g.name == q.grade_id), None)
        if nb.id not in indices or grade is None:
            continue
        comment = next((c for c in nb.comments if c.name == q.grade_id), None)
        hand = kept.get(nb.student.id)
        previous = None
        if hand is not None and hand.previous_score is not None and grade.needs_manual_grade:
            previous = dict(score=hand.previous_score, comment=hand.previous_comment or "",
                            ticks=read_ticks(hand.previous_ticks),
                            when=hand.changed_at.strftime("%d %b %Y %H:%M UTC") if hand.changed_at else "")
        rows.append(dict(number=indices[nb.id] + 1, submission=nb.id, grade=grade.id,
                         comment=comment.id if comment else None,
                         score=grade.manual_score if grade.manual_score is not None else grade.auto_score,
                         pending=bool(grade.needs_manual_grade),
                         text=comment.manual_comment if comment and comment.manual_comment else "",
                         ticks=read_ticks(hand.ticks) if hand is not None and grade.manual_score is not None else [],
                         previous=previous,
                         html=answer_html(answer_sources(notebook_path(nb.student.id)).get(q.grade_id))))
    return sorted(rows, key=lambda r: r["number"])


def valid_ticks(q: Question, ticks) -> list[int] | None:
    """``ticks`` as the sorted line numbers of ``q``'s scheme they name, or None when they are not such a list (a
    number out of range, twice, or a partial line ticked with its own item)."""
    lines = q.lines
    if not isinstance(ticks, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ticks):
        return None
    if len(set(ticks)) != len(ticks) or not all(0 <= t < len(lines) for t in ticks):
        return None
    items = [i for i, (_, _, of) in enumerate(lines) if of is None]  # line number of each item
    for t in ticks:
        of = lines[t][2]
        if of is not None and items[of] in ticks:
            return None
    return sorted(ticks)


def escape(text) -> str:
    return html.escape(str(text), quote=True)


def pending_counts(gradebook) -> dict[tuple[str, str, str], tuple[int, int]]:
    """``(assignment, notebook, grade id) -> (answers, still to grade)`` for every graded cell, in one query."""
    from nbgrader.api import Assignment, BaseCell, Grade, Notebook
    from sqlalchemy import case, func

    rows = (gradebook.db.query(Assignment.name, Notebook.name, BaseCell.name, func.count(Grade.id),
                               func.sum(case((Grade.needs_manual_grade, 1), else_=0)))
            .join(BaseCell, Grade.cell_id == BaseCell.id).join(Notebook, BaseCell.notebook_id == Notebook.id)
            .join(Assignment, Notebook.assignment_id == Assignment.id)
            .group_by(Assignment.name, Notebook.name, BaseCell.name))
    return {(a, n, g): (int(total), int(pending or 0)) for a, n, g, total, pending in rows}


# -- the pages ---------------------------------------------------------------------------------------------------
TEMPLATES = Path(__file__).resolve().parent / "templates" / "marking"


def render(name: str, **values) -> str:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
    env.filters["points"] = lambda p: "" if p is None else f"{float(p):g}"
    return env.get_template(name).render(**values)


def inline_html(markdown: str) -> str:
    """:func:`markdown_html` of one line, without its paragraph (for a list item or a label)."""
    text = markdown_html(markdown).strip()
    if text.startswith("<p>") and text.endswith("</p>") and text.count("<p>") == 1:
        text = text[3:-4]
    return text


def routes() -> list[tuple]:
    """The question pages' handlers, for the Formgrader's server (added by :mod:`.nbgrader_patches`)."""
    from nbgrader.server_extensions.formgrader.base import BaseHandler, check_notebook_dir, check_xsrf
    from tornado import web

    from .formgrader_pages import nonced

    class Page(BaseHandler):
        def page(self, body: str) -> None:
            body, policy = nonced(body)
            self.set_header("Content-Security-Policy", policy)
            self.set_header("Cache-Control", "no-store")
            self.write(body)

    class QuestionsHandler(Page):
        """Every written question of every assignment in the gradebook, with the answers still to grade."""

        @web.authenticated
        @check_xsrf
        @check_notebook_dir
        def get(self):
            counts = pending_counts(self.gradebook)
            course = Path(self.coursedir.root)
            groups = []
            for assignment in sorted(a.name for a in self.gradebook.assignments):
                found = [(q, *counts.get((q.assignment, q.notebook, q.grade_id), (0, 0)))
                         for q in questions(course, assignment)]
                if found:
                    groups.append((assignment, found))
            self.page(render("questions.html", groups=groups, base_url=self.base_url, url=question_url))

    class QuestionHandler(Page):
        """One question's answers, from every hand-in, with the mark scheme (see the module's docstring)."""

        @web.authenticated
        @check_xsrf
        @check_notebook_dir
        def get(self, assignment_id, notebook_id, grade_id):
            from .trust import plain_id

            names = (assignment_id, notebook_id, grade_id)
            q = question(Path(self.coursedir.root), *names) if all(plain_id(n) for n in names) else None
            if q is None:
                raise web.HTTPError(404, f"No written question {grade_id} in {assignment_id}/{notebook_id}")
            indices = self.api.get_notebook_submission_indices(assignment_id, notebook_id)

            def notebook_path(student: str) -> Path:
                folder = self.coursedir.format_path(self.coursedir.autograded_directory, student, assignment_id)
                return Path(folder) / f"{notebook_id}.ipynb"

            rows = class_answers(self.gradebook, q, indices, notebook_path)
            only_pending = self.get_argument("show", "") == "pending"
            shown = [r for r in rows if r["pending"]] if only_pending else rows
            self.page(render("question.html", q=q, rows=shown, total=len(rows),
                             pending=sum(r["pending"] for r in rows), only_pending=only_pending,
                             base_url=self.base_url, here=question_url(self.base_url, q),
                             prompt=markdown_html(q.prompt), model=markdown_html(q.model),
                             items=[(p, inline_html(t)) for p, t in q.items],
                             lines=[(p, inline_html(t), of) for p, t, of in q.lines]))

    class TicksHandler(BaseHandler):
        """``PUT /formgrader/question-ticks/<grade id>`` with ``{"ticks": [line numbers]}``: which lines of the mark
        scheme a grader ticked for one written answer, kept with its grade (:mod:`.handgrades`); stored after the
        score they add up (a score set afterwards, by any page, clears them)."""

        @web.authenticated
        @check_xsrf
        @check_notebook_dir
        def put(self, grade_id):
            from nbgrader.api import MissingEntry

            from .handgrades import row_of_grade

            try:
                grade = self.gradebook.find_grade_by_id(grade_id)
            except MissingEntry:
                raise web.HTTPError(404, "No such grade") from None
            names = (grade.notebook.assignment.assignment.name, grade.notebook.notebook.name, grade.cell.name)
            q = question(Path(self.coursedir.root), *names)
            if q is None:
                raise web.HTTPError(404, f"{grade.cell.name} is not a written question with a mark scheme")
            ticks = valid_ticks(q, (self.get_json_body() or {}).get("ticks"))
            if ticks is None:
                raise web.HTTPError(400, f"ticks: a list of distinct line numbers from 0 to {len(q.lines) - 1}, "
                                         "never a partial line with its own item")
            if ticks and grade.manual_score is None:
                raise web.HTTPError(409, "save the score before its ticks")
            row_of_grade(self.gradebook.db, grade).ticks = json.dumps(ticks)
            self.gradebook.db.commit()
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps({"grade": grade.id, "ticks": ticks}))

    return [(r"/formgrader/questions/?", QuestionsHandler),
            (r"/formgrader/questions/([^/]+)/([^/]+)/([^/]+)/?", QuestionHandler),
            (r"/formgrader/question-ticks/([^/]+)/?", TicksHandler)]
