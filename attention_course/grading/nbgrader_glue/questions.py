"""The question pages of the Formgrader: every written question of every assignment, and one question at a time
with every student's answer beside its mark scheme, ticked line by line (:mod:`.marking` reads the schemes).
Their routes are added to the Formgrader's server by :func:`.formgrader.install`; each page runs only the scripts
that carry its nonce (:func:`nonced`).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from nbgrader.api import Assignment, BaseCell, Grade, MissingEntry, Notebook
from nbgrader.server_extensions.formgrader.base import BaseHandler, check_notebook_dir, check_xsrf
from sqlalchemy import case, func
from tornado import web

from ..trust import plain_id
from .handgrades import read_ticks, row_of_grade, rows_for
from .marking import Question, answer_html, markdown_html, question, question_url, questions, written_cells


def answer_sources(path: Path) -> dict[str, dict]:
    """``grade_id -> written answer cell`` of a graded notebook (cached while the file is unchanged)."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    return _answers(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _answers(path: str, mtime_ns: int, size: int) -> dict[str, dict]:
    """The written answers of the notebook at ``path`` as it was at ``mtime_ns`` and ``size`` (the cache's key)."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        nb = {}
    return {c["metadata"]["nbgrader"].get("grade_id"): c for _, c in written_cells(nb)}


def class_answers(gradebook, q: Question, indices: dict, notebook_path) -> list[dict]:
    """Every hand-in's answer to ``q``: number (the Formgrader's), ids, score, comment, ticks, the grade it had before
    its text changed (:mod:`.handgrades`) and the answer's HTML, in the Formgrader's order. ``indices``: submission
    id -> the Formgrader's index; ``notebook_path(student)``: the graded notebook's path."""
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


def pending_counts(gradebook) -> dict[tuple[str, str, str], tuple[int, int]]:
    """``(assignment, notebook, grade id) -> (answers, still to grade)`` for every graded cell, in one query."""
    rows = (gradebook.db.query(Assignment.name, Notebook.name, BaseCell.name, func.count(Grade.id),
                               func.sum(case((Grade.needs_manual_grade, 1), else_=0)))
            .join(BaseCell, Grade.cell_id == BaseCell.id).join(Notebook, BaseCell.notebook_id == Notebook.id)
            .join(Assignment, Notebook.assignment_id == Assignment.id)
            .group_by(Assignment.name, Notebook.name, BaseCell.name))
    return {(a, n, g): (int(total), int(pending or 0)) for a, n, g, total, pending in rows}


# -- the pages ---------------------------------------------------------------------------------------------------
TEMPLATES = Path(__file__).resolve().parent / "templates" / "marking"


def render(name: str, **values) -> str:
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
    """The question pages' handlers, for the Formgrader's server (added by :mod:`.patches`)."""
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


# -- the Formgrader's submission page ------------------------------------------------------------
_SCRIPT = re.compile(r"<script(?=[\s>])", re.IGNORECASE)


def nonced(page: str) -> tuple[str, str]:
    """The page with every one of its ``<script>`` elements given a fresh nonce, and the policy that allows
    only those (so a script or handler that reached the page from a hand-in would not run)."""
    nonce = secrets.token_urlsafe(18)
    page = _SCRIPT.sub(f'<script nonce="{nonce}"', page)
    policy = (f"default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
              "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; "
              "base-uri 'none'; form-action 'self'; frame-ancestors 'self'")
    return page, policy
