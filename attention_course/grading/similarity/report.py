"""Which hand-ins were copied? A similarity report over the students' own code.

``python -m attention_course.grading similarity ASSIGNMENT`` reads ``submitted/*/ASSIGNMENT/*.ipynb`` and writes
``report/similarity/ASSIGNMENT.json`` and ``.html`` (the page: :mod:`.page`).

What is compared: every code cell a student handed in, with the release's cells left out: a cell whose text is a
release cell's is dropped, and every fingerprint of the release's code (starter code, locked cells, tests) is
boilerplate that never counts. What is left is normalised before fingerprinting so that disguises do not help:
the code is parsed and printed again from its syntax tree (comments and formatting gone), docstrings and other
bare strings are dropped, and the definitions of a cell are put in a canonical order. Fingerprints come from
copydetect (winnowing, as MOSS; it tokenises with Pygments and replaces every identifier by one letter, so renaming
does not help either). Code that many students share (more than ``max(COMMON_MIN, COMMON_SHARE * n)`` hand-ins:
what everyone writes for ``softmax``) is left out as MOSS does, and pairs are found through an index of the
fingerprints: only pairs sharing a fingerprint are compared. Code the report cannot read (``exec`` of a computed
string...) is named, cell by cell, as opaque (:mod:`.opaque`). Each hand-in is compared whole and by
part (each function or class the release names, against the same part of every other hand-in), fingerprints
weighed by how rare they are in the class; a pair's score is its strongest evidence (:mod:`.parts`).
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from .. import trust
from ..cells import BEGIN_STARTER, END_STARTER, python_source, replace_blocks, without_solution_markers
from .fingerprints import candidate_pairs, covered, drop_common, fingerprint, weigh
from .normal import normalise, normalise_all  # noqa: F401  (normalise: one cell, for tests and tools)
from .opaque import opaque_entries, read
from .page import (
    summary,  # the command's summary, beside the page
    write_page,
)
from .parts import RARE_WHOLE, fingerprint_parts, part_pairs
from .read import file_constructs

#: Pairs scoring at least this are flagged (see the README for how it was chosen).
THRESHOLD = 0.6
#: The most code of one hand-in that is compared (the master's answers to an assignment are under 10,000
#: characters); fingerprinting costs about 10 ms per 1,000 characters.
MAX_CODE = 60_000


@dataclass
class Handin:
    """One student's own code, normalised, and copydetect's fingerprint of it."""

    student: str
    code: str
    opaque: list = field(default_factory=list)  # the cells and files whose code it cannot read
    fingerprint: object = None
    weights: object = None  # their weights (CORPUS_WEIGHT where the master has the same code)
    total: float = 0.0
    parts: dict = field(default_factory=dict)  # part -> (its normalised text, its fingerprint): .parts
    full: object = None  # its fingerprint before common code is left out (hashes, hash_idx, k, filtered_code)


@dataclass
class Result:
    assignment: str
    students: list
    pairs: list  # dicts, best first
    skipped: dict = field(default_factory=dict)  # student -> why
    notes: dict = field(default_factory=dict)  # student -> what was compared of a hand-in only in part
    threshold: float = THRESHOLD
    texts: dict = field(default_factory=dict)  # student -> normalised code (for the page)
    compared: int = 0  # pairs compared (those sharing a fingerprint that is not common code)
    opaque: list = field(default_factory=list)  # dicts: a cell or file of a hand-in whose code it cannot read

    def as_json(self) -> dict:
        """The interface other tools read: exactly ``{"pairs": [...], "threshold": t, "opaque": [...]}``."""
        return {"pairs": [{k: v for k, v in p.items() if k not in ("slices", "part_slices")} for p in self.pairs],
                "threshold": self.threshold, "opaque": [{k: v for k, v in o.items() if k != "excerpt"}
                                                        for o in self.opaque]}


# ---- the students' own code ------------------------------------------------------------------------------------

_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _cells(nb) -> list[tuple[int, str | None, str]]:
    """A notebook's code cells: their place in its list of cells, their id (nbformat's, when it is one) and their
    source; ValueError if it is not a notebook."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook (no list of cells)")
    out = []
    for index, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            raise ValueError("not a notebook (a cell is not an object)")
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise ValueError("not a notebook (a cell's source is not text)")
        cell_id = cell.get("id")
        out.append((index, cell_id if isinstance(cell_id, str) and _CELL_ID.fullmatch(cell_id) else None, source))
    return out


@dataclass
class Release:
    """What every student was given: the release's code cells (their exact text), the names they define (never
    dropped by the normaliser), and all of it normalised (boilerplate)."""

    cells: set
    api: frozenset
    text: str
    files: dict = field(default_factory=dict)  # the release's .py files: relative path -> text


def release_code(course: Path, assignment: str) -> Release:
    cells = []
    for path in sorted((course / "release" / assignment).glob("*.ipynb")):
        cells += [c for _, _, c in _cells(json.loads(path.read_text(encoding="utf-8")))]
    api = set()
    for cell in cells:
        try:
            for n in ast.parse(python_source(cell)).body:
                if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                    api.add(n.name)
                elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                    api |= {t.id for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        except (SyntaxError, ValueError, RecursionError):
            continue
    api = frozenset(api - {"_"})
    folder = course / "release" / assignment
    files = {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8", errors="replace")
             for p in sorted(folder.rglob("*.py"))}
    return Release({c.strip() for c in cells}, api, normalise_all(cells + list(files.values()), api), files)


def master_code(course: Path, assignment: str, api: frozenset) -> str:
    """The master's answers (its solution cells, markers out, starter code dropped), normalised: the code that an
    independent correct answer most naturally shares, which weighs :data:`CORPUS_WEIGHT` in a pair's score."""
    sources = []
    for path in sorted((course / "source" / assignment).glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                source = replace_blocks(source, BEGIN_STARTER, END_STARTER, lambda lines, indent: [])
                sources.append(without_solution_markers(source))
    return normalise_all(sources, api)


def own_code(folder: Path, notebooks: list[str], release: Release, handin) -> tuple[str, list]:
    """A student's own code in an assignment: every code cell that is not exactly a release cell, and every ``.py``
    file handed in beside the notebooks, normalised together; and the cells and files of it whose code the report
    cannot read (:func:`.opaque.opaque_entries`). Raises ValueError for a hand-in that has no readable
    notebook."""
    release_cells = release.cells
    parts, found, files, unread = [], 0, {}, {}
    for name in notebooks:
        if not handin.readable(name):
            continue
        try:
            nb = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ValueError(f"{trust.display_name(name)} is not a readable notebook ({type(exc).__name__})") from None
        found += 1
        try:
            parts += [((name, i, cell_id), c) for i, cell_id, c in _cells(nb) if c.strip() and c.strip() not in release_cells]
        except ValueError as exc:
            raise ValueError(f"{trust.display_name(name)}: {exc}") from None
    if not found:
        problems = "; ".join(handin.problems())
        raise ValueError("no notebook of the assignment handed in" + (f" ({problems})" if problems else ""))
    for path, rel, size in sorted(handin.files, key=lambda f: f[1]):
        data = None
        if rel.endswith(".py") and size <= MAX_CODE:  # a module the notebook imports, read as text
            try:
                data = Path(path).read_bytes()
                files[rel] = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                pass
        if why := file_constructs(rel, size, data, MAX_CODE):
            unread[rel] = why
        if rel in files and release.files.get(rel) != files[rel]:  # a file every student was given is not theirs
            parts.append(((rel, None, None), files[rel]))
    kept, size = [], 0
    for place, part in parts:  # what a flood of code would cost to parse is bounded: 4 x MAX_CODE of it is read
        kept.append((place, part[:max(0, 4 * MAX_CODE - size)]))
        size += len(part)
        if size >= 4 * MAX_CODE:
            break
    sources = [part for _, part in kept]
    parsed, constructs = read(sources, files, release.files)
    code = normalise_all(sources, release.api, parsed)
    return code, opaque_entries([place for place, _ in kept], sources, constructs, unread)


def handed_in(course: Path, assignment: str) -> bool:
    """Whether any folder of ``submitted/`` holds a hand-in of the assignment."""
    root = course / "submitted"
    return root.is_dir() and any(os.path.lexists(p / assignment) for p in root.iterdir())


def read_class(course: Path, assignment: str, release: Release) -> tuple[list[Handin], dict, dict]:
    """Every hand-in of the assignment in ``submitted/``, those that could not be read (with the reason), and those
    compared only in part (over :data:`MAX_CODE`)."""
    notebooks = sorted(p.name for p in (course / "release" / assignment).glob("*.ipynb"))
    handins, skipped, notes = [], {}, {}
    root = course / "submitted"
    for folder in sorted(root.iterdir() if root.is_dir() else []):
        if not os.path.lexists(folder / assignment):
            continue
        if not trust.plain_id(folder.name):
            skipped[trust.display_name(folder.name)] = "the folder's name is not a plain student id"
            continue
        handin = trust.submitted(course, folder.name, assignment)
        try:
            if handin.whole:
                raise ValueError("; ".join(handin.problems()))
            code, opaque = own_code(folder / assignment, notebooks, release, handin)
        except ValueError as exc:
            skipped[folder.name] = str(exc)
            continue
        if len(code) > MAX_CODE:
            notes[folder.name] = f"only the first {MAX_CODE:,} of its {len(code):,} characters of code compared"
            code = code[:MAX_CODE]
        handins.append(Handin(folder.name, code, opaque))
    return handins, skipped, notes


# ---- fingerprints and pairs -------------------------------------------------------------------------------------


def compare(a: Handin, b: Handin) -> dict:
    """Two hand-ins' shares (the weighted part of each one's code found in the other) and the whole's score: their
    mean, times ``min(1, n / RARE_WHOLE)`` where ``n`` is the code they share, common code included
    (:mod:`.parts`): two hand-ins that are only a few short idiomatic answers are little evidence."""
    matched = a.fingerprint.hashes & b.fingerprint.hashes
    shares, tokens = [], 0
    for h in (a, b):
        mask = covered(h.fingerprint, matched)
        tokens = max(tokens, int(mask.sum()))
        shares.append(min(1.0, float(h.weights[mask].sum()) / h.total) if h.total else 0.0)
    score = sum(shares) / 2
    if score and tokens < RARE_WHOLE:
        everything = a.full.hashes & b.full.hashes
        score *= min(1.0, max(int(covered(h.full, everything).sum()) for h in (a, b)) / RARE_WHOLE)
    return {"students": [a.student, b.student], "score": round(score, 4), "whole": round(score, 4),
            "shares": [round(x, 4) for x in shares], "matched_tokens": tokens, "parts": []}


def matched_regions(a: Handin, b: Handin) -> list:
    """copydetect's matched regions of a pair (for the page), in each one's code."""
    from copydetect import compare_files

    return [s.tolist() for s in compare_files(a.fingerprint, b.fingerprint)[2]]


def part_regions(a: Handin, b: Handin, part: str) -> dict:
    """A shared part of a pair, for the page: each one's text of it and copydetect's matched regions in it."""
    from copydetect import compare_files

    (ta, fa), (tb, fb) = a.parts[part], b.parts[part]
    return {"texts": [ta, tb], "slices": [s.tolist() for s in compare_files(fa, fb)[2]]}


def analyse(course: Path, assignment: str, threshold: float = THRESHOLD, common: int | None = None) -> Result:
    """Read, fingerprint and compare the class; pairs best first (ties by name), those sharing nothing left out."""
    release = release_code(course, assignment)
    handins, skipped, notes = read_class(course, assignment, release)
    boilerplate = sorted(fingerprint("release", release.text, None).hashes) if release.text else None
    master = master_code(course, assignment, release.api)
    corpus = fingerprint("master", master, boilerplate).hashes if master else set()
    for h in handins:
        h.fingerprint = fingerprint(h.student, h.code, boilerplate)
        h.full = SimpleNamespace(hashes=set(h.fingerprint.hashes), hash_idx=dict(h.fingerprint.hash_idx),
                                 k=h.fingerprint.k, filtered_code=h.fingerprint.filtered_code)
    limit = drop_common(handins, common)
    for h in handins:
        weigh(h, corpus)
    _, part_weights = fingerprint_parts(handins, release.api, master, boilerplate, limit)
    shared_parts = part_pairs(handins, part_weights)
    candidates = sorted(candidate_pairs(handins) | set(shared_parts))
    pairs = [compare(handins[i], handins[j]) for i, j in candidates]
    for (i, j), p in zip(candidates, pairs):
        p["parts"] = shared_parts.get((i, j), [])
        p["score"] = max([p["whole"], *(x["score"] for x in p["parts"])])
    by_name = {h.student: h for h in handins}
    pairs = [p for p in pairs if p["score"] > 0]
    for p in pairs:
        p["flagged"] = p["score"] >= threshold
        if p["flagged"]:
            a, b = (by_name[s] for s in p["students"])
            p["slices"] = matched_regions(a, b)
            p["part_slices"] = {name: part_regions(a, b, name) for x in p["parts"] for name in x.get("of", [x["part"]])}
    pairs.sort(key=lambda p: (-p["score"], p["students"]))
    return Result(assignment, [h.student for h in handins], pairs, skipped, notes, threshold,
                  {h.student: h.code for h in handins}, len(candidates),
                  [{"student": h.student, **o} for h in handins for o in h.opaque])


def write(course: Path, assignment: str, out: Path | None = None, threshold: float = THRESHOLD,
          common: int | None = None) -> Result:
    """Analyse the class and write ``<out>/<assignment>.json`` and ``.html`` (out: ``report/similarity``)."""
    if not (course / "release" / assignment).is_dir():
        raise FileNotFoundError(f"no release of {assignment}: run `make release` first")
    result = analyse(course, assignment, threshold, common)
    out = out or course / "report" / "similarity"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{assignment}.json").write_text(json.dumps(result.as_json(), indent=1) + "\n", encoding="utf-8")
    write_page(result, out)
    return result


def main(course: Path, assignments: list[str], threshold: float = THRESHOLD, common: int | None = None) -> int:
    for assignment in assignments:
        try:
            result = write(course, assignment, threshold=threshold, common=common)
        except FileNotFoundError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(summary(result, course / "report" / "similarity" / f"{assignment}.html"))
    return 0
