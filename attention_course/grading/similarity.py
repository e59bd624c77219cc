"""Which hand-ins were copied? A similarity report over the students' own code.

``python -m attention_course.grading similarity ASSIGNMENT`` reads ``submitted/*/ASSIGNMENT/*.ipynb`` and writes
``report/similarity/ASSIGNMENT.json`` and ``.html`` (the page: :mod:`.similarity_page`).

What is compared: every code cell a student handed in, with the release's cells left out: a cell whose text is a
release cell's is dropped, and every fingerprint of the release's code (starter code, locked cells, tests) is
boilerplate that never counts. What is left is normalised before fingerprinting so that disguises do not help:
the code is parsed and printed again from its syntax tree (comments and formatting gone), docstrings and other
bare strings are dropped, and the definitions of a cell are put in a canonical order. Fingerprints come from
copydetect (winnowing, as MOSS; it tokenises with Pygments and replaces every identifier by one letter, so renaming
does not help either). Code that many students share (more than ``max(COMMON_MIN, COMMON_SHARE * n)`` hand-ins:
what everyone writes for ``softmax``) is left out as MOSS does, and pairs are found through an index of the
fingerprints: only pairs sharing a fingerprint are compared.
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import trust
from .cells import python_source

#: copydetect's settings, as MOSS uses them: a match must span at least NOISE characters of the tokenised code
#: (identifiers count one character each), and any match of GUARANTEE characters is found.
NOISE, GUARANTEE = 20, 28
#: Pairs scoring at least this are flagged (see the README for how it was chosen).
THRESHOLD = 0.6
#: A fingerprint in more hand-ins than max(COMMON_MIN, COMMON_SHARE * n) is common code, not evidence.
COMMON_MIN, COMMON_SHARE = 10, 0.1
#: The most code of one hand-in that is compared (the master's answers to an assignment are under 10,000
#: characters); fingerprinting costs about 10 ms per 1,000 characters.
MAX_CODE = 60_000


@dataclass
class Handin:
    """One student's own code, normalised, and copydetect's fingerprint of it."""

    student: str
    code: str
    fingerprint: object = None


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

    def as_json(self) -> dict:
        """The interface other tools read: exactly ``{"pairs": [...], "threshold": t}``."""
        return {"pairs": [{k: v for k, v in p.items() if k != "slices"} for p in self.pairs],
                "threshold": self.threshold}


# ---- the students' own code ------------------------------------------------------------------------------------

class _Canonical(ast.NodeTransformer):
    """Drops docstrings and bare strings; puts each run of consecutive definitions in a name-free order."""

    def _body(self, body: list) -> list:
        body = [self.visit(node) for node in body
                if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        body = [node for node in body if node is not None] or [ast.Pass()]
        out, run = [], []
        for node in body + [None]:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                run.append(node)
                continue
            out += sorted(run, key=_shape)
            run = []
            if node is not None:
                out.append(node)
        return out

    def visit_ClassDef(self, node):
        for method in node.body:  # a method's first parameter is `self`, whatever it was called
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args:
                first = method.args.args[0].arg
                if first != "self" and not any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(method)):
                    method.args.args[0].arg = "self"
                    for n in ast.walk(method):
                        if isinstance(n, ast.Name) and n.id == first:
                            n.id = "self"
        return self.generic_visit(node)

    def generic_visit(self, node):
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, name, None), list) and getattr(node, name):
                setattr(node, name, self._body(getattr(node, name)))
        for handler in getattr(node, "handlers", []) or []:
            handler.body = self._body(handler.body)
        return node


def _shape(node) -> str:
    """A definition with every name erased: the same however its names were chosen."""
    text = ast.dump(node, annotate_fields=False)
    for kind in ("Name", "arg", "FunctionDef", "ClassDef", "Attribute", "alias"):
        text = text.replace(f"{kind}('", f"{kind}(_'")
    return re.sub(r"_'[^']*'", "_", text)


def normalise(source: str) -> str:
    """A cell's code printed again from its syntax tree: no comments, docstrings or formatting, definitions in a
    canonical order. Code that does not parse is kept as written (copydetect's tokeniser still reads it)."""
    try:
        tree = ast.parse(python_source(source))
    except (SyntaxError, ValueError, RecursionError):
        return source.strip()
    try:
        tree.body = _Canonical()._body(tree.body)
        return ast.unparse(ast.fix_missing_locations(tree)).strip()
    except (RecursionError, ValueError):
        return source.strip()


def _cells(nb) -> list[str]:
    """The sources of a notebook's code cells; ValueError if it is not a notebook."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook (no list of cells)")
    out = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            raise ValueError("not a notebook (a cell is not an object)")
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise ValueError("not a notebook (a cell's source is not text)")
        out.append(source)
    return out


def release_code(course: Path, assignment: str) -> tuple[set[str], str]:
    """The release's code cells (their exact text) and all of them normalised, as one text."""
    cells = []
    for path in sorted((course / "release" / assignment).glob("*.ipynb")):
        cells += _cells(json.loads(path.read_text(encoding="utf-8")))
    return {c.strip() for c in cells}, "\n".join(normalise(c) for c in cells)


def own_code(folder: Path, notebooks: list[str], release_cells: set[str], handin) -> str:
    """A student's own code in an assignment: every code cell that is not exactly a release cell, normalised.
    Raises ValueError for a hand-in that has no readable notebook."""
    parts, found = [], 0
    for name in notebooks:
        if not handin.readable(name):
            continue
        try:
            nb = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ValueError(f"{trust.display_name(name)} is not a readable notebook ({type(exc).__name__})") from None
        found += 1
        try:
            parts += [normalise(c) for c in _cells(nb) if c.strip() and c.strip() not in release_cells]
        except ValueError as exc:
            raise ValueError(f"{trust.display_name(name)}: {exc}") from None
    if not found:
        problems = "; ".join(handin.problems())
        raise ValueError("no notebook of the assignment handed in" + (f" ({problems})" if problems else ""))
    return "\n\n".join(parts)


def handed_in(course: Path, assignment: str) -> bool:
    """Whether any folder of ``submitted/`` holds a hand-in of the assignment."""
    root = course / "submitted"
    return root.is_dir() and any(os.path.lexists(p / assignment) for p in root.iterdir())


def read_class(course: Path, assignment: str, release_cells: set[str]) -> tuple[list[Handin], dict, dict]:
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
            code = own_code(folder / assignment, notebooks, release_cells, handin)
        except ValueError as exc:
            skipped[folder.name] = str(exc)
            continue
        if len(code) > MAX_CODE:
            notes[folder.name] = f"only the first {MAX_CODE:,} of its {len(code):,} characters of code compared"
            code = code[:MAX_CODE]
        handins.append(Handin(folder.name, code))
    return handins, skipped, notes


# ---- fingerprints and pairs -------------------------------------------------------------------------------------

def fingerprint(name: str, code: str, boilerplate):
    from copydetect import CodeFingerprint

    return CodeFingerprint(f"{name}.py", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate,
                           language="python", fp=io.StringIO(code))


def drop_common(handins: list[Handin], common: int | None = None) -> int:
    """Leave out of every fingerprint the hashes found in more hand-ins than the common-code limit (``common``, or
    by default max(COMMON_MIN, COMMON_SHARE * n)); returns it."""
    from copydetect.utils import get_token_coverage

    limit = max(COMMON_MIN, int(COMMON_SHARE * len(handins))) if common is None else common
    counts = defaultdict(int)
    for h in handins:
        for value in h.fingerprint.hashes:
            counts[value] += 1
    common = {value for value, n in counts.items() if n > limit}
    for h in handins:
        fp = h.fingerprint
        if fp.hashes & common:
            fp.hashes = fp.hashes - common
            fp.hash_idx = {v: i for v, i in fp.hash_idx.items() if v not in common}
            fp.token_coverage = get_token_coverage(fp.hash_idx, fp.k, len(fp.filtered_code)) if fp.hash_idx else 0
    return limit


def candidate_pairs(handins: list[Handin]) -> set[tuple[int, int]]:
    """Pairs (i < j) that share at least one fingerprint, found through an index from fingerprint to hand-ins."""
    index = defaultdict(list)
    for i, h in enumerate(handins):
        for value in h.fingerprint.hashes:
            index[value].append(i)
    pairs = set()
    for holders in index.values():
        pairs.update(itertools.combinations(holders, 2))
    return pairs


def compare(a: Handin, b: Handin) -> dict:
    """copydetect's comparison of two hand-ins: the share of each one's code found in the other, the matched
    regions, and the pair's score (the mean of the two shares)."""
    from copydetect import compare_files

    if not a.fingerprint.token_coverage or not b.fingerprint.token_coverage:
        return {"students": [a.student, b.student], "score": 0.0, "shares": [0.0, 0.0], "matched_tokens": 0}
    tokens, (share_a, share_b), slices = compare_files(a.fingerprint, b.fingerprint)
    share_a, share_b = min(1.0, float(share_a)), min(1.0, float(share_b))
    return {"students": [a.student, b.student], "score": round((share_a + share_b) / 2, 4),
            "shares": [round(share_a, 4), round(share_b, 4)], "matched_tokens": int(tokens),
            "slices": [s.tolist() for s in slices]}


def analyse(course: Path, assignment: str, threshold: float = THRESHOLD, common: int | None = None) -> Result:
    """Read, fingerprint and compare the class; pairs best first (ties by name), those sharing nothing left out."""
    release_cells, boiler_text = release_code(course, assignment)
    handins, skipped, notes = read_class(course, assignment, release_cells)
    boilerplate = sorted(fingerprint("release", boiler_text, None).hashes) if boiler_text else None
    for h in handins:
        h.fingerprint = fingerprint(h.student, h.code, boilerplate)
    drop_common(handins, common)
    candidates = candidate_pairs(handins)
    pairs = [compare(handins[i], handins[j]) for i, j in candidates]
    pairs = [p for p in pairs if p["score"] > 0]
    for p in pairs:
        p["flagged"] = p["score"] >= threshold
    pairs.sort(key=lambda p: (-p["score"], p["students"]))
    return Result(assignment, [h.student for h in handins], pairs, skipped, notes, threshold,
                  {h.student: h.code for h in handins}, len(candidates))


def write(course: Path, assignment: str, out: Path | None = None, threshold: float = THRESHOLD,
          common: int | None = None) -> Result:
    """Analyse the class and write ``<out>/<assignment>.json`` and ``.html`` (out: ``report/similarity``)."""
    from .similarity_page import write_page

    if not (course / "release" / assignment).is_dir():
        raise FileNotFoundError(f"no release of {assignment}: run `make release` first")
    result = analyse(course, assignment, threshold, common)
    out = out or course / "report" / "similarity"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{assignment}.json").write_text(json.dumps(result.as_json(), indent=1) + "\n", encoding="utf-8")
    write_page(result, out)
    return result


def summary(result: Result, page: Path | None = None) -> str:
    flagged = [p for p in result.pairs if p["flagged"]]
    n = len(result.students)
    lines = [f"{result.assignment}: {n} hand-ins compared, {n * (n - 1) // 2} pairs, {len(flagged)} flagged "
             f"(score >= {result.threshold:g})"]
    lines += [f"  {p['score']:.2f}  {p['students'][0]} and {p['students'][1]}" for p in flagged[:20]]
    if len(flagged) > 20:
        lines.append(f"  ... and {len(flagged) - 20} more (see {page or 'the page'})")
    lines += [f"  not compared: {trust.display_name(s)}: {why}" for s, why in result.skipped.items()]
    lines += [f"  compared in part: {s}: {what}" for s, what in result.notes.items()]
    return "\n".join(lines)


def main(course: Path, assignments: list[str], threshold: float = THRESHOLD, common: int | None = None) -> int:
    for assignment in assignments:
        try:
            result = write(course, assignment, threshold=threshold, common=common)
        except FileNotFoundError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(summary(result, course / "report" / "similarity" / f"{assignment}.html"))
    return 0
