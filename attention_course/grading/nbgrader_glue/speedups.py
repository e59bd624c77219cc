"""What nbgrader 0.9.6 does again and again for the same answer, done once per process instead (installed by
:func:`.patches.install`, with the course's other changes to nbgrader; none changes what nbgrader computes):

``api.create_engine``
    One SQLAlchemy engine per gradebook URL, so that its cache of compiled statements outlives a ``Gradebook``; a
    process forked from this one starts with none of them (:func:`after_fork`).
``api.get_alembic_version``
    The gradebook schema's version read from nbgrader's own migration scripts in this process, once: stock nbgrader
    starts the ``alembic`` command (a Python of its own, 1.5 core-seconds) for every gradebook it creates, and
    fails where ``alembic`` is not on ``PATH``.
``common.jsonschema``
    One validator per schema instead of re-checking the schema itself for every cell (50 ms per hand-in).
``api.Gradebook.__init__``
    A gradebook whose tables are all there opened with one query listing them, not one more for each table (nbgrader
    opens seven a hand-in); one that lacks any is opened by nbgrader itself, which makes them.
``SaveAutoGrades.preprocess``
    A notebook's scores and comments recorded in one transaction instead of one commit per cell, each cell's row
    found among the notebook's rows read at once instead of by a query of its own.
"""

from __future__ import annotations

import functools
import os
import threading
import types

import jsonschema
import nbgrader.api
import nbgrader.dbutil
from nbgrader.api import (Assignment, BaseCell, Comment, Grade, Notebook, Student, SubmittedAssignment,
                          SubmittedNotebook)
from nbgrader.nbgraderformat import common
from nbgrader.preprocessors import SaveAutoGrades
from sqlalchemy import inspect
from sqlalchemy.orm import scoped_session, sessionmaker

STOCK_SAVE = SaveAutoGrades.preprocess
PATCHED = ["api.create_engine", "api.Gradebook.__init__", "api.get_alembic_version", "nbgraderformat.common.jsonschema",
           "SaveAutoGrades.preprocess"]


def install() -> None:
    """Apply the five (:func:`.patches.install` calls this once per process)."""
    _one_validator()
    _one_engine()
    _open_after_one_look()
    nbgrader.api.get_alembic_version = alembic_head
    SaveAutoGrades.preprocess = save_in_one_transaction


@functools.lru_cache(maxsize=None)
def alembic_head() -> str:
    """The head revision of nbgrader's gradebook migrations (what ``alembic heads`` prints first), from the scripts
    nbgrader ships: the version a new gradebook is stamped with."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", nbgrader.dbutil.ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


#: This process's engines, by gradebook URL and arguments (:func:`_one_engine`).
_ENGINES: dict = {}
_ENGINES_LOCK = threading.Lock()


def _one_engine() -> None:
    """nbgrader makes a new SQLAlchemy engine for every ``Gradebook`` it opens (seven for each hand-in autograded),
    and with it throws away SQLAlchemy's cache of compiled statements: 40 statements compiled again for every hand-in,
    0.15 core-seconds of it. Here a process keeps one engine per gradebook URL; a ``Gradebook`` still closes its
    connections when it closes (``engine.dispose()``), so only the cache outlives it. A forked process starts with
    none (:func:`after_fork`)."""
    stock = nbgrader.api.create_engine

    def create_engine(url, *args, **kwargs):
        key = (str(url), args, tuple(sorted(kwargs.items())))
        with _ENGINES_LOCK:
            if key not in _ENGINES:
                _ENGINES[key] = stock(url, *args, **kwargs)
            return _ENGINES[key]
    nbgrader.api.create_engine = create_engine
    os.register_at_fork(after_in_child=after_fork)


def after_fork() -> None:
    """In a process just forked (a grading process forked from the course command, :func:`.run.worker.worker_context`):
    forget the parent's engines without closing what they hold (``dispose(close=False)``, as SQLAlchemy prescribes
    after a fork), so the child opens connections of its own and never uses one its parent has."""
    global _ENGINES_LOCK
    _ENGINES_LOCK = threading.Lock()  # (a lock held by another thread at the fork stays held in the child)
    for engine in _ENGINES.values():
        engine.dispose(close=False)
    _ENGINES.clear()


def _open_after_one_look() -> None:
    """nbgrader opens a ``Gradebook`` seven times for each hand-in autograded, and each open lists the database's
    tables, then asks for each of them whether it exists (``create_all``): about 16 queries, 2 to 3 ms an open. Here
    an open lists the tables (one query, as nbgrader's own first step does) and, where every table of the gradebook's
    schema is there (nbgrader's and the course's: ``Base.metadata``), opens as nbgrader would but for the rest: a
    session bound to the engine, and the course's row checked (``check_course``, which makes it where missing).
    Where one is missing (a new gradebook, one deleted and made again, an older copy put back), nbgrader's own
    ``__init__`` opens it, making what is missing as it always has."""
    stock = nbgrader.api.Gradebook.__init__

    def __init__(self, db_url, course_id="default_course", authenticator=None):
        engine = nbgrader.api.create_engine(db_url, echo=False, future=True)
        if not set(nbgrader.api.Base.metadata.tables) <= set(inspect(engine).get_table_names()):
            return stock(self, db_url, course_id, authenticator)
        self.engine = engine
        self.db = scoped_session(sessionmaker(autoflush=True, bind=engine, future=True))
        self.check_course(course_id=course_id)
        self.course_id = course_id
        self.authenticator = authenticator

    nbgrader.api.Gradebook.__init__ = __init__


def _one_validator() -> None:
    """nbgrader 0.9.6 checks each cell's nbgrader metadata with ``jsonschema.validate``, which first checks
    nbgrader's own constant schema against JSON Schema's metaschema: 1.5 ms per cell, 50 ms of every hand-in.
    Here one validator per schema does the same checks, and raises the same ``ValidationError``."""
    made = {}

    def validate(instance, schema, *args, **kwargs):
        if args or kwargs:
            return jsonschema.validate(instance, schema, *args, **kwargs)
        entry = made.get(id(schema))
        if entry is None or entry[0] is not schema:
            jsonschema.validators.validator_for(schema).check_schema(schema)
            entry = made[id(schema)] = (schema, jsonschema.validators.validator_for(schema)(schema))
        error = jsonschema.exceptions.best_match(entry[1].iter_errors(instance))
        if error is not None:
            raise error

    common.jsonschema = types.SimpleNamespace(validate=validate)


class _FlushOnly:
    """A gradebook session whose ``commit`` only sends the pending rows to the database (inside the transaction)."""

    def __init__(self, session):
        self._session = session

    def __getattr__(self, name):
        return getattr(self._session, name)

    def commit(self) -> None:
        self._session.flush()


def save_in_one_transaction(self, nb, resources):
    """nbgrader 0.9.6's ``SaveAutoGrades.preprocess``, with one commit for the notebook: stock nbgrader commits after
    every grade and every comment it records (about 40 commits for a hand-in of 01; on SQLite each one waits for the
    disk, 3 ms here, and the hand-ins' workers queue for the database's one writer between them). The same rows, by
    nbgrader's own ``_add_score`` and ``_add_comment``, written together; a step that fails part-way writes none of
    the notebook's rows (stock nbgrader leaves the cells before the failure recorded). Each cell's row is found among
    the notebook's rows, read in one query each for grades and comments (:class:`_Rows`), where stock nbgrader
    queries the gradebook once for every cell."""
    info = resources["nbgrader"]
    self.notebook_id, self.assignment_id = info["notebook"], info["assignment"]
    self.student_id, self.db_url = info["student"], info["db_url"]
    self.gradebook = nbgrader.api.Gradebook(self.db_url)
    with self.gradebook:
        session = self.gradebook.db
        self.gradebook.db = _FlushOnly(session)
        rows = _Rows(self.gradebook, session, self.notebook_id, self.assignment_id, self.student_id)
        self.gradebook.find_grade, self.gradebook.find_comment = rows.grade, rows.comment
        try:
            nb, resources = super(SaveAutoGrades, self).preprocess(nb, resources)
        finally:
            self.gradebook.db = session
            del self.gradebook.find_grade, self.gradebook.find_comment
        session.commit()
    return nb, resources


class _Rows:
    """A submitted notebook's grades and comments, read once, found by cell name as nbgrader 0.9.6's ``find_grade``
    and ``find_comment`` find them: the row of the grade (or solution) cell of that name, else of the task cell; a
    name with no row, or more than one row of the kind found, is left to nbgrader's own method, which raises as it
    always has (``MissingEntry``, or SQLAlchemy's error for several)."""

    def __init__(self, gradebook, session, notebook: str, assignment: str, student: str):
        self._gradebook, self._key = gradebook, (notebook, assignment, student)
        self.grades = self._read(session, Grade, notebook, assignment, student)
        self.comments = self._read(session, Comment, notebook, assignment, student)

    @staticmethod
    def _read(session, model, notebook, assignment, student) -> dict:
        return rows_by_cell(session, model, lambda query: query
                            .join(SubmittedNotebook, SubmittedNotebook.id == model.notebook_id)
                            .join(Notebook, Notebook.id == SubmittedNotebook.notebook_id)
                            .join(SubmittedAssignment, SubmittedAssignment.id == SubmittedNotebook.assignment_id)
                            .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id)
                            .join(Student, Student.id == SubmittedAssignment.student_id)
                            .filter(Notebook.name == notebook, Assignment.name == assignment, Student.id == student))

    def _find(self, rows: dict, first: str, name: str, stock):
        for kind in (first, "TaskCell"):
            matches = rows.get((name, kind), [])
            if len(matches) == 1:
                return matches[0]
            if matches:
                break
        return stock(self._gradebook, name, *self._key)

    def grade(self, name: str, *_):
        return self._find(self.grades, "GradeCell", name, nbgrader.api.Gradebook.find_grade)

    def comment(self, name: str, *_):
        return self._find(self.comments, "SolutionCell", name, nbgrader.api.Gradebook.find_comment)


def rows_by_cell(session, model, select) -> dict:
    """(cell name, cell type) -> the rows of ``model`` (:class:`Grade` or :class:`Comment`) that ``select`` (a
    function of the query) keeps, each with its cell's name and type read in the same query."""
    found: dict = {}
    for row, name, kind in select(session.query(model, BaseCell.name, BaseCell.type)
                                  .join(BaseCell, BaseCell.id == model.cell_id)):
        found.setdefault((name, kind), []).append(row)
    return found
