"""Trust rules on a hand-in's notebook and what the grader takes from it: cells rebuilt from the gradebook in
the master's order, the names the judge may fetch from a kernel, arguments changed in place, and grades within
their cells' points."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import wire
from ..cells import BEGIN_STARTER, END_STARTER, bound_names, cell_source, global_names, replace_blocks, signatures, uncomment
from .pages import inert_attachments

_source = cell_source


def master_order(course: Path, assignment: str, notebook: str, names: list[str]) -> list[str]:
    """``names`` (gradebook cells) in the order of the master notebook in ``source/``, where it can be read;
    cells the master does not hold keep their gradebook place after their predecessor."""
    try:
        master = json.loads((Path(course) / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        master = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in master["cells"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return list(names)
    known = set(names)
    ordered = [n for n in master if n in known]
    for i, name in enumerate(names):
        if name not in ordered:
            before = next((names[j] for j in range(i - 1, -1, -1) if names[j] in ordered), None)
            ordered.insert(ordered.index(before) + 1 if before else 0, name)
    return list(dict.fromkeys(ordered))


def rebuilt_cells(cells: list, gradebook: dict, order: list[str], missing=None) -> list:
    """Rule: a hand-in's cells as they are graded, rebuilt from the gradebook; none of its metadata is trusted.

    ``gradebook`` maps each gradebook cell's name to ``(cell_type, source, locked, checksum, points, role)``
    (``points`` None for an ungraded cell, ``role`` "solution", "task" or None); ``order`` is the master's.
    A cell whose ``grade_id`` names a gradebook cell (first occurrence only) gets that cell's metadata from the
    gradebook, and, when locked, its source too. Every other cell becomes a plain student cell: its nbgrader
    metadata, tags (such as ``skip-execution``) and outputs are dropped. The gradebook cells stand in the
    master's order (missing ones put back, each reported through ``missing(name)``); each plain cell follows
    the gradebook cell it followed in the hand-in, so no moving, duplicating or deleting of cells changes
    what runs before a test. Markdown cells keep only their pasted raster images."""
    from nbformat import NotebookNode  # here: the fork server, which imports trust with the judge, stays light

    def fresh(kind, md, src, cell):
        new = NotebookNode(cell_type=kind, metadata=NotebookNode(md), source=src)
        if kind == "code":
            new.outputs, new.execution_count = [], None
        elif kind == "markdown" and cell is not None:
            kept = inert_attachments(cell.get("attachments"))
            if kept:
                new.attachments = NotebookNode(kept)
        return new

    def trusted(name, cell=None):
        kind, src, locked, checksum, points, role = gradebook[name]
        md = {"grade": points is not None and role != "task", "grade_id": name, "locked": locked,
              "solution": role == "solution", "schema_version": 3, "cell_type": kind}
        if points is not None:
            md["points"] = points
        if role == "task":
            md["task"] = True
        if checksum:
            md["checksum"] = checksum
        student = cell is not None and not locked
        return fresh(kind, {"nbgrader": NotebookNode(md)}, _source(cell) if student else src, cell if student else None)

    def plain(cell):
        kind = cell.get("cell_type") if cell.get("cell_type") in ("code", "markdown", "raw") else "raw"
        return fresh(kind, {}, _source(cell), cell)

    placed, after, anchor = {}, {None: []}, None
    for cell in cells:
        md = cell.get("metadata", {}).get("nbgrader", {})
        name = md.get("grade_id") if isinstance(md, dict) else None
        if isinstance(name, str) and name in gradebook and name not in placed:
            placed[name], anchor = cell, name
        else:
            after.setdefault(anchor, []).append(plain(cell))
    rebuilt = list(after[None])
    for name in order:
        if name not in placed and missing is not None:
            missing(name)
        rebuilt.append(trusted(name, placed.get(name)))
        rebuilt.extend(after.get(name, []))
    return rebuilt


def tests_as_in_source(master: list | None, gradebook: dict) -> list[str]:
    """Rule: a hand-in is graded only with the tests and points of the master in ``source/``. ``master``: the master
    notebook's cells (None: unreadable, nothing to compare); ``gradebook``: that notebook's cells as
    :func:`rebuilt_cells` takes them. Returns how the gradebook's copy differs, a line each (empty: it is the
    master's): a cell new in or gone from the master, points changed, the source of a test or read-only cell changed
    (a solution cell's source is the student's and is not compared)."""
    if master is None:
        return []
    want = {}
    for cell in master:
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        name = meta.get("grade_id")
        if not isinstance(name, str) or not any(meta.get(k) for k in ("grade", "solution", "locked", "task")):
            continue
        graded = bool(meta.get("grade") or meta.get("task"))
        source = None if meta.get("solution") else replace_blocks(_source(cell), BEGIN_STARTER, END_STARTER, uncomment)
        want[name] = (float(meta.get("points", 0)) if graded else None, source,
                      "test" if graded and not meta.get("solution") else "answer" if graded else "read-only")
    lines = [f"cell {name} is new in source/" for name in want if name not in gradebook]
    lines += [f"cell {name} is gone from source/" for name in gradebook if name not in want]
    for name, (points, source, kind) in want.items():
        if name not in gradebook:
            continue
        _, held, _, _, held_points, role = gradebook[name]
        if (points is None) != (held_points is None) or (points is not None and abs(points - held_points) > 1e-9):
            lines.append(f"{kind} cell {name}: points {_points(held_points)} -> {_points(points)}")
        if source is not None and role != "solution" and source != held:
            lines.append(f"{kind} cell {name}: its source changed")
    return lines


def _points(value) -> str:
    return "none" if value is None else f"{value:g}"


def student_names(course: Path, assignment: str, notebook: str, nb) -> frozenset:
    """Rule: the names the judge may take from the student's kernel are those the master's unlocked code
    cells (solutions, starter code, demonstrations) bind, minus every name a locked cell binds.

    The master is read from ``source/``; without it, the names the hand-in's own unlocked cells bind."""
    locked = set()
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("locked"):
            locked |= bound_names(cell.source)
    sources = []
    try:
        master = json.loads((Path(course) / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        for cell in master["cells"]:
            if cell["cell_type"] != "code":
                continue
            if cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
                locked |= bound_names(_source(cell))
            else:
                sources.append(replace_blocks(_source(cell), BEGIN_STARTER, END_STARTER, uncomment))
    except (OSError, ValueError, KeyError, TypeError):
        sources = [c.source for c in nb.cells if c.cell_type == "code"
                   and not c.metadata.get("nbgrader", {}).get("locked")]
    names = set()
    for src in sources:
        names |= bound_names(src)
    return frozenset(names - locked)


def notebook_globals(course: Path, assignment: str, notebook: str, nb) -> frozenset:
    """Rule: the student's functions are called by the tests with the notebook's own variables out of reach: the
    names the master's cells bind at their top level, but for its answers (solution cells) and its tests: setup,
    examples and demonstrations, locked or not. The agent hides those holding data from the kernel's namespace for
    each call (:func:`.agent._hide`). A function that reads one (the book's sizes ``D_udl``, a demonstration's
    ``Q_demo``, instead of its argument's shape) fails with a message naming it (:func:`.failures.remote_error`).

    The master is read from ``source/``; without it, the hand-in's locked cells."""
    def locked(md) -> bool:
        return bool(md.get("locked")) and not (md.get("grade") and not md.get("solution"))

    def setting(md) -> bool:  # neither an answer nor a test
        return not md.get("solution") and not md.get("grade")

    try:
        master = json.loads((Path(course) / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        sources = [_source(c) for c in master["cells"]
                   if c["cell_type"] == "code" and setting(c.get("metadata", {}).get("nbgrader", {}))]
    except (OSError, ValueError, KeyError, TypeError):
        sources = [c.source for c in nb.cells if c.cell_type == "code" and locked(c.metadata.get("nbgrader", {}))]
    names = set()
    for src in sources:
        names |= global_names(src)
    return frozenset(names)


def master_signatures(course: Path, assignment: str, notebook: str) -> dict[str, tuple[str, ...]]:
    """The parameters of the functions and classes the master's unlocked cells define (:func:`.cells.signatures`):
    the course's own names for what a test passes to a student's function, for its notes."""
    found: dict[str, tuple[str, ...]] = {}
    try:
        master = json.loads((Path(course) / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        for cell in master["cells"]:
            if cell["cell_type"] == "code" and not cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
                found.update(signatures(replace_blocks(_source(cell), BEGIN_STARTER, END_STARTER, uncomment)))
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return found


def changed_in_place(function: str | None, sent: list, returned: list | None, described: list,
                     hidden: bool = False) -> str | None:
    """Rule: an argument a student's function changed in place is a note on the check that called it, never a lost
    point, and the note speaks only the course's words. Arguments cross to the kernel as copies, so nothing the
    student's code does to them changes the test's own arrays; ``returned`` is the state of the kernel's copies after
    the call *as the kernel reports it*, and a hand-in that rewrites the course agent in its kernel can report
    anything (README, "Not defended"): no point may rest on it. ``function`` is the name the test looked the
    function up by and ``described`` each sent array's parameter in the master's signature (None where there is
    none): nothing the kernel says after a call (a ``__name__``, a signature) is quoted. On a hidden line the note
    names no argument (which of them changed is the kernel's to say). Returns the note, or None."""
    changed = []
    if returned is not None and len(returned) == len(sent):
        for i, (original, new) in enumerate(zip(sent, returned)):
            if not wire.same_value(original, new):
                changed.append(None if hidden or i >= len(described) else described[i])
    if not changed:
        return None
    named = sorted({n for n in changed if n})
    what = f"its argument{'s' if len(named) > 1 else ''} {', '.join(named)}" if named else "an argument"
    return (f"your function {function or 'a function of yours'} changed {what} in place: the "
            "caller's arrays must be left as they were. Work on new arrays (e.g. `Q = X @ W + b`, "
            "`x = x - x.max()`), not `X += ...`, `x -= ...` or `x[...] = ...` on an argument.")


#: The course's extra-credit rule: extra credit on one cell is at most this share of the cell's points.
EXTRA_CREDIT_SHARE = 0.25


def _number(value) -> float | None:
    if value is None or value == "":
        return None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"a score must be a finite number, not {value!r}")
    return number


def capped_grade(manual, extra, max_score) -> tuple[float | None, float | None]:
    """Rule: a cell's manual score is between 0 and its points, its extra credit between 0 and
    ``EXTRA_CREDIT_SHARE`` of its points; values outside are brought to the nearest allowed one."""
    manual, extra = _number(manual), _number(extra)
    top = float(max_score) if max_score is not None else math.inf
    if manual is not None:
        manual = min(max(manual, 0.0), top)
    if extra is not None:
        extra = min(max(extra, 0.0), EXTRA_CREDIT_SHARE * top)
    return manual, extra
