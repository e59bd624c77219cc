"""Synthetic submissions made from a master notebook.

The demo class and the grading tests need notebooks that a student could
have handed in: the full solution, the untouched release, and the solution
with one realistic mistake, or with a different but correct approach. They
are described in ``source/<assignment>/catalogue.py`` as :class:`Submission`
objects and built here.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

from attention_course.grading.cells import BEGIN_HIDDEN, BEGIN_STARTER, END_HIDDEN, END_STARTER, replace_blocks

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_MARK_SCHEME, END_MARK_SCHEME = "### BEGIN MARK SCHEME", "### END MARK SCHEME"


@dataclass
class Submission:
    """One synthetic student's answer to an assignment.

    ``edits`` are ``(grade_id, old, new)`` replacements applied to the
    solution cell ``grade_id`` of the master (``old`` must occur exactly once);
    ``replace`` maps a solution cell's ``grade_id`` to its whole new source.
    ``loses`` names the grade cells a mistake must lose points in; every other
    grade cell must keep full points. An alternative correct answer has an
    empty ``loses``. ``says`` is the phrase the first failed check's message
    (in notebook order) must contain: the misconception it names, never another one. ``in_demo`` puts the
    submission in the demo class of ``make demo``. ``headline`` is the phrase that the *visible* checks (the
    release's test cells, what Validate runs) must show for a mistake: set on the headline misconception of every
    part, and on every mistake a visible check was written to name (each round of findings); ``make test`` grades
    and validates every entry that has one.
    ``unseen_by_validate`` is the reason a mistake passes every visible check (the visible checks cannot see it
    without giving the answer away): the short list of mistakes Validate may call a "Success".
    ``noted`` marks a function that changes an argument in place: the grader learns of that only from the
    student's own kernel, so it costs no autograded point; the phrase must be in the note the feedback shows, and
    the visible checks (Validate, in the student's kernel) must fail on it with ``headline``.
    """

    name: str
    description: str
    edits: list = field(default_factory=list)
    replace: dict = field(default_factory=dict)
    loses: frozenset = frozenset()
    says: str = ""
    in_demo: bool = False
    headline: str = ""
    unseen_by_validate: str = ""
    noted: str = ""
    transform: object = None
    files: dict = field(default_factory=dict)
    base: str = ""  # BLANK: the untouched release, not the master, is what the edits and the transform change
    parts: tuple = ()  # a hand-in of several entries (:func:`packed`): the entries, in catalogue order

    @property
    def is_mistake(self) -> bool:
        return bool(self.loses)

    @property
    def is_alternative(self) -> bool:
        """A correct answer: every autograded point, and Validate passes."""
        return not self.loses and not self.noted


def in_dtype(sources: dict, dtype: str) -> dict:
    """Solution cells (grade id -> source) written with the placeholder ``DTYPE`` (``torch.DTYPE``), for one dtype:
    one answer graded in float64 and in float32."""
    return {cell: source.replace("DTYPE", dtype) for cell, source in sources.items()}


def catalogue_module(path: Path):
    """A catalogue file, imported."""
    spec = importlib.util.spec_from_file_location(f"catalogue_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_catalogue(path: Path) -> list[Submission]:
    """The ``SUBMISSIONS`` list of a catalogue file."""
    subs = list(catalogue_module(path).SUBMISSIONS)
    names = [s.name for s in subs]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: duplicate submission names")
    return subs


def representative(catalogue: list[Submission], keep=()) -> list[Submission]:
    """The part of a catalogue that ``make test`` grades and validates (``make sweep`` takes all of it), in
    catalogue order: every alternative correct answer, every in-place change (``noted``), every part's headline
    mistake, then the fewest further mistakes with which every grade cell that some mistake targets is lost by at
    least one (the mistake losing the most cells not yet lost first, ties in catalogue order), and the entries
    named in ``keep`` (those the hostile hand-ins are built on). So every claim of the grading tests is tried on
    every assignment and every grade cell is seen to fail; the other mistakes repeat a cell already tried."""
    chosen = {s.name for s in catalogue if s.is_alternative or s.noted or s.headline or s.name in set(keep)}
    mistakes = [s for s in catalogue if s.is_mistake]
    lost = set().union(*(s.loses for s in mistakes if s.name in chosen))
    targeted = set().union(*(s.loses for s in mistakes))
    while lost != targeted:
        best = max(mistakes, key=lambda s: len(s.loses - lost))  # max keeps the first of equals
        chosen.add(best.name)
        lost |= best.loses
    return [s for s in catalogue if s.name in chosen]


#: The most catalogue entries one hand-in of ``make test`` carries (:func:`packed`).
PACK_SIZE = 4


def edited_cells(sub: Submission) -> set[str]:
    """The solution cells an entry changes."""
    return set(sub.replace) | {grade_id for grade_id, _, _ in sub.edits}


def packable(sub: Submission) -> bool:
    """An entry that can share a hand-in: a plain mistake or alternative made of cell edits (no in-place change,
    which only the feedback's note shows; no transform, extra file or blank base)."""
    return (sub.is_mistake or sub.is_alternative) and not (sub.noted or sub.transform or sub.files or sub.base)


def packed(entries: list[Submission], keep=()) -> list[Submission]:
    """The hand-ins ``make test`` grades and validates for ``entries`` (``make sweep`` hands each entry in alone):
    entries that change different solution cells and, for mistakes, lose different grade cells share one hand-in, as
    a student with several independent mistakes (or several correct variations) would hand in, up to
    :data:`PACK_SIZE`; mistakes share with mistakes, alternatives with alternatives. Each part's claim is then read
    in its own cells: a mistake loses its ``loses`` and says its ``says`` in the first of them; no cell outside the
    parts' ``loses`` is lost. The entries named in ``keep`` (compared by name elsewhere), in-place changes and
    entries built otherwise than by cell edits stay alone. First fit, in catalogue order: deterministic."""
    groups: list[list[Submission]] = []
    keep = set(keep)
    for sub in entries:
        home = None
        if packable(sub) and sub.name not in keep:
            home = next((g for g in groups if len(g) < PACK_SIZE and packable(g[0]) and g[0].name not in keep
                         and all(o.is_mistake == sub.is_mistake and not edited_cells(o) & edited_cells(sub)
                                 and not o.loses & sub.loses for o in g)), None)
        if home is None:
            groups.append([sub])
        else:
            home.append(sub)
    return [g[0] if len(g) == 1 else pack(g) for g in groups]


def pack(parts: list[Submission]) -> Submission:
    """One hand-in made of ``parts`` (entries changing different cells): named after the first."""
    return Submission(f"{parts[0].name}+{len(parts) - 1}-more", "; ".join(p.description for p in parts),
                      edits=[e for p in parts for e in p.edits], replace={k: v for p in parts for k, v in p.replace.items()},
                      loses=frozenset().union(*(p.loses for p in parts)), parts=tuple(parts))


def read_notebook(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_notebook(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def solved_notebook(master: dict) -> dict:
    """The master as a student who wrote the reference solution would hand it in.

    Solution markers are removed (their content kept), starter blocks, mark
    schemes and hidden tests are dropped, and outputs are cleared.
    """
    nb = copy.deepcopy(master)
    for cell in nb["cells"]:
        src = _source(cell)
        src = replace_blocks(src, BEGIN_STARTER, END_STARTER, lambda lines, indent: [])
        src = replace_blocks(src, BEGIN_HIDDEN, END_HIDDEN, lambda lines, indent: [])
        src = replace_blocks(src, BEGIN_MARK_SCHEME, END_MARK_SCHEME, lambda lines, indent: [])
        src = replace_blocks(src, BEGIN_SOLUTION, END_SOLUTION, lambda lines, indent: lines)
        cell["source"] = src
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def apply_submission(masters: dict[str, dict], sub: Submission) -> dict[str, dict]:
    """The notebooks ``sub`` describes, built from an assignment's master notebooks.

    ``masters`` maps notebook file names to notebooks; so does the result.
    Every ``grade_id`` that ``sub`` names must be in exactly one of them.
    """
    notebooks = {name: solved_notebook(nb) for name, nb in masters.items()}
    cells = {}
    for nb in notebooks.values():
        for cell in nb["cells"]:
            if _grade_id(cell):
                cells[_grade_id(cell)] = cell
    for grade_id, new_source in sub.replace.items():
        if grade_id not in cells:
            raise KeyError(f"{sub.name}: no cell with grade_id {grade_id!r}")
        cells[grade_id]["source"] = new_source.strip("\n")
    for grade_id, old, new in sub.edits:
        if grade_id not in cells:
            raise KeyError(f"{sub.name}: no cell with grade_id {grade_id!r}")
        src = _source(cells[grade_id])
        if src.count(old) != 1:
            raise ValueError(f"{sub.name}: {old!r} occurs {src.count(old)} times in {grade_id!r}, expected once")
        cells[grade_id]["source"] = src.replace(old, new)
    return notebooks


COMPLETE, BLANK = "complete", "blank"


def write_class(course: Path, assignment: str, roster: dict) -> list[str]:
    """Write one notebook set per student into ``course/submitted``.

    ``roster`` maps a student id to a :class:`Submission`, or to ``COMPLETE``
    (the reference solution) or ``BLANK`` (the release as students receive it,
    so the release must exist), or to a :class:`Submission` whose ``base`` is ``BLANK`` (its ``transform`` applied
    to the release). Returns the student ids written.
    """
    source, release = course / "source" / assignment, course / "release" / assignment
    masters = {p.name: read_notebook(p) for p in sorted(source.glob("*.ipynb"))}
    if not masters:
        raise FileNotFoundError(f"no master notebook in {source}")
    for student, what in roster.items():
        if what == COMPLETE:
            notebooks = {name: solved_notebook(nb) for name, nb in masters.items()}
        elif what == BLANK or getattr(what, "base", None) == BLANK:
            notebooks = {name: read_notebook(release / name) for name in masters}
        else:
            notebooks = apply_submission(masters, what)
        folder = course / "submitted" / student / assignment
        if getattr(what, "transform", None):
            notebooks = what.transform(notebooks)
        for name, nb in notebooks.items():
            if isinstance(nb, tuple):  # a link, a pipe... in the notebook's place
                folder.mkdir(parents=True, exist_ok=True)
                make_special(folder / name, nb)
            elif isinstance(nb, str):  # a damaged file, written as it is
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(nb, encoding="utf-8")
            else:
                write_notebook(nb, folder / name)
        for rel, content in getattr(what, "files", {}).items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, tuple):
                make_special(path, content)
            else:
                path.write_bytes(content)
    return list(roster)


def make_special(path: Path, spec: tuple) -> None:
    """A file that is not plain content: ``("symlink", target)``, ``("hardlink", target relative to the file's
    folder)``, ``("fifo",)``, ``("device", major, minor)`` or ``("sparse", bytes)``."""
    import os
    import stat

    kind = spec[0]
    if kind == "symlink":
        path.symlink_to(spec[1])
    elif kind == "hardlink":
        os.link((path.parent / spec[1]).resolve(), path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(spec[1], spec[2]))
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(spec[1])
    else:
        raise ValueError(f"unknown special file {spec!r}")


def catalogue_roster(catalogue: list[Submission]) -> dict:
    """Every catalogue submission under its own name, plus the complete and blank ones (for tests)."""
    return {COMPLETE: COMPLETE, BLANK: BLANK, **{sub.name: sub for sub in catalogue}}


#: The demo class: two reference students and six who each hand in every assignment.
DEMO_STUDENTS = ["ada", "bruno", "chiara", "dmitri", "esi", "farid"]


def demo_roster(catalogue: list[Submission]) -> dict:
    """The demo class for one assignment: its ``in_demo`` submissions dealt out to the named students.

    Students left without one hand in the reference solution.
    """
    chosen = [sub for sub in catalogue if sub.in_demo]
    roster = {"demo-complete": COMPLETE, "demo-blank": BLANK}
    for i, student in enumerate(DEMO_STUDENTS):
        roster[student] = chosen[i] if i < len(chosen) else COMPLETE
    return roster


class _Rename(ast.NodeTransformer):
    """Renames every name bound inside a function (assignments, loop and comprehension variables) but its
    parameters, which callers may name (``softmax(S, axis=0)``, ``attention_head(X, **head)``)."""

    def __init__(self, rng):
        self.rng, self.names = rng, {}

    def new(self, name: str) -> str:
        if name not in self.names:
            self.names[name] = f"{self.rng.choice(['tmp', 'val', 'my', 'x', 'res'])}_{len(self.names)}{self.rng.randrange(99)}"
        return self.names[name]

    def visit_FunctionDef(self, node):
        params = {a.arg for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.Lambda))
                  for a in n.args.args + n.args.kwonlyargs + n.args.posonlyargs}
        local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - params
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in local:
                sub.id = self.new(sub.id)
        return node


def disguise(notebooks: dict[str, dict], seed: int = 0) -> dict[str, dict]:
    """A copy dressed up to pass for someone else's work: in every answer cell each local name renamed (not the
    parameters: callers name them), comments
    dropped, docstrings replaced, the code printed again from its syntax tree and its functions in reverse order."""
    import random

    rng = random.Random(seed)
    out = copy.deepcopy(notebooks)
    for nb in out.values():
        for cell in nb["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell["cell_type"] != "code" or not meta.get("solution"):
                continue
            try:
                tree = ast.parse(_source(cell))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                    body[0].value.value = rng.choice(["My implementation.", "Helper written for the homework.",
                                                      "Computes the required result."])
            tree = _Rename(rng).visit(tree)
            defs = [i for i, node in enumerate(tree.body) if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
            reordered = [tree.body[i] for i in reversed(defs)]
            for i, node in zip(defs, reordered):
                tree.body[i] = node
            cell["source"] = ast.unparse(tree)
    return out
