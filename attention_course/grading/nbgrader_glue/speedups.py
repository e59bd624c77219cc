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
``SaveAutoGrades.preprocess``
    A notebook's scores and comments recorded in one transaction instead of one commit per cell.
"""

from __future__ import annotations

import functools
import os
import threading
import types

import jsonschema
import nbgrader.api
import nbgrader.dbutil
from nbgrader.nbgraderformat import common
from nbgrader.preprocessors import SaveAutoGrades

STOCK_SAVE = SaveAutoGrades.preprocess
PATCHED = ["api.create_engine", "api.get_alembic_version", "nbgraderformat.common.jsonschema",
           "SaveAutoGrades.preprocess"]


def install() -> None:
    """Apply the four (:func:`.patches.install` calls this once per process)."""
    _one_validator()
    _one_engine()
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
    the notebook's rows (stock nbgrader leaves the cells before the failure recorded)."""
    info = resources["nbgrader"]
    self.notebook_id, self.assignment_id = info["notebook"], info["assignment"]
    self.student_id, self.db_url = info["student"], info["db_url"]
    self.gradebook = nbgrader.api.Gradebook(self.db_url)
    with self.gradebook:
        session = self.gradebook.db
        self.gradebook.db = _FlushOnly(session)
        try:
            nb, resources = super(SaveAutoGrades, self).preprocess(nb, resources)
        finally:
            self.gradebook.db = session
        session.commit()
    return nb, resources
