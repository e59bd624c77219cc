"""The copies of issue 61, built as students who copy would build them, for tests/test_similarity_parts.py.

In a class of one assignment, three independent authors (the master's solution, a catalogue alternative in another
style, the catalogue's ``alt-own-style``) and two honest "idiomatic" authors (each answers only the short functions,
the way the master does, in names and spellings of their own) hand in beside four copies:

* ``copy-part``: the other-style author's hand-in with one function (:data:`PART`) copied word for word from the
  own-style author;
* ``copy-halves``: the first half of the answer cells from the other-style author, the rest from the own-style one;
* ``copy-port``: the own-style author's NumPy answers written in PyTorch, the same structure (``np.max`` as
  ``torch.amax``, ``axis`` as ``dim``, ``.T`` as ``.transpose(-2, -1)``, ``@`` as ``torch.matmul``...);
* ``copy-rewrite``: the own-style author's hand-in "made to look different": every local name renamed and the
  docstrings replaced (:func:`tools.submissions.disguise`), ``x / sqrt(d)`` as ``x * d ** -0.5``, matrix products
  as ``einsum``, ``S[mask] = v`` as ``np.where`` and back, ``1 / b ** f`` as ``b ** -f``, independent updates
  reordered (:func:`tools.disguises.reorder`).

These are similarity inputs: they are not graded here (a port's tensors may not pass a NumPy check).
"""

from __future__ import annotations

import ast
import copy
import random
import shutil
from pathlib import Path

from attention_course.grading.cells import cell_source
from attention_course.grading.course import ROOT, catalogue_path
from tools.disguises import reorder
from tools.submissions import BLANK, COMPLETE, disguise, load_catalogue, read_notebook, write_class, write_notebook

OTHER_STYLE = {"01_self_attention": "alt-torch-float32", "06_efficient_attention": "alt-torch-float32",
               "07_attention_backward": "alt-torch-float32"}
#: The function copied alone (the issue's: 01 ``attention_by_token``, 06 ``tiled_attention``).
PART = {"01_self_attention": "attention_by_token", "06_efficient_attention": "tiled_attention",
        "07_attention_backward": "window_attention"}
#: The short answer cells the idiomatic authors answer (grade ids of the master's solution cells).
SHORT = {"01_self_attention": ("scaled_scores", "softmax", "self_attention"),
         "06_efficient_attention": ("online",), "07_attention_backward": ("jacobian", "backward")}
INDEPENDENT = ("master", "other-style", "own-style", "idiom-a", "idiom-b")
COPIES = {"copy-part": ("own-style",), "copy-halves": ("other-style", "own-style"), "copy-port": ("own-style",),
          "copy-rewrite": ("own-style",)}


def answer_cells(nb: dict):
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            yield cell


def _grade_id(cell) -> str:
    return cell["metadata"]["nbgrader"].get("grade_id", "")


def _rewrite_cells(notebooks: dict, change) -> dict:
    out = copy.deepcopy(notebooks)
    for nb in out.values():
        for cell in answer_cells(nb):
            try:
                tree = ast.parse(cell_source(cell))
            except SyntaxError:
                continue
            cell["source"] = ast.unparse(ast.fix_missing_locations(change(tree)))
    return out


# ---- a port to PyTorch ------------------------------------------------------------------------------------------

_TORCH_NAMES = {"max": "amax", "min": "amin", "array": "tensor", "asarray": "as_tensor", "concatenate": "cat",
                "identity": "eye", "allclose": "allclose", "maximum": "maximum", "empty": "empty"}
_KEYWORDS = {"axis": "dim", "keepdims": "keepdim"}


class _Port(ast.NodeTransformer):
    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy"):
            if node.attr == "sqrt":
                return ast.Attribute(ast.Name("math", ast.Load()), "sqrt", node.ctx)
            return ast.Attribute(ast.Name("torch", ast.Load()), _TORCH_NAMES.get(node.attr, node.attr), node.ctx)
        if node.attr == "T" and isinstance(node.ctx, ast.Load):
            return ast.Call(ast.Attribute(node.value, "transpose", ast.Load()),
                            [ast.Constant(-2), ast.Constant(-1)], [])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        for k in node.keywords:
            k.arg = _KEYWORDS.get(k.arg, k.arg)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult):
            return ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "matmul", ast.Load()),
                            [node.left, node.right], [])
        return node

    def visit_FunctionDef(self, node):
        """Its array parameters taken in as tensors (``X = torch.as_tensor(X)``), the names it returns given back
        as NumPy arrays (``.numpy()``)."""
        self.generic_visit(node)
        arrays = [a.arg for a in node.args.args if a.arg[:1].isupper() or a.arg in ("x", "q", "k", "v", "p")]
        node.body[:0] = [ast.Assign([ast.Name(a, ast.Store())], ast.Call(ast.Attribute(
            ast.Name("torch", ast.Load()), "as_tensor", ast.Load()), [ast.Name(a, ast.Load())], [])) for a in arrays]
        for ret in [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]:
            values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
            back = [ast.Call(ast.Attribute(v, "numpy", ast.Load()), [], []) if isinstance(v, ast.Name) else v
                    for v in values]
            ret.value = ast.Tuple(back, ast.Load()) if isinstance(ret.value, ast.Tuple) else back[0]
        return node


def port(notebooks: dict) -> dict:
    return _rewrite_cells(notebooks, lambda tree: _Port().visit(tree))


# ---- "make it look different" -----------------------------------------------------------------------------------

def _positive(node):
    """``-node`` for an exponent that leads with a minus sign (``-2.0 * i / d``, ``-f``), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return node.operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        inner = _positive(node.left)
        return None if inner is None else ast.BinOp(inner, node.op, node.right)
    return None


class _LookDifferent(ast.NodeTransformer):
    """``x / sqrt(d)`` as ``x * d ** -0.5``, ``a @ b`` as an einsum, ``1 / b ** f`` as ``b ** -f``,
    ``S[mask] = v`` as ``S = np.where(mask, v, S)``."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        right = node.right
        if isinstance(node.op, ast.Div) and isinstance(right, ast.Call) and getattr(right.func, "attr", "") == "sqrt" \
                and len(right.args) == 1:
            return ast.BinOp(node.left, ast.Mult(), ast.BinOp(right.args[0], ast.Pow(), ast.Constant(-0.5)))
        if isinstance(node.op, ast.Div) and isinstance(node.left, ast.Constant) and node.left.value == 1 \
                and isinstance(right, ast.BinOp) and isinstance(right.op, ast.Pow):
            return ast.BinOp(right.left, ast.Pow(), ast.UnaryOp(ast.USub(), right.right))
        if isinstance(node.op, ast.MatMult):
            return ast.Call(ast.Attribute(ast.Name("np", ast.Load()), "einsum", ast.Load()),
                            [ast.Constant("...ij,...jk->...ik"), node.left, node.right], [])
        if isinstance(node.op, ast.Pow) and _positive(node.right) is not None:  # b ** (-2 * i / d) as 1 / b ** (2 * i / d)
            return ast.BinOp(ast.Constant(1.0), ast.Div(), ast.BinOp(node.left, ast.Pow(), _positive(node.right)))
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        target = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                and (isinstance(target.slice, ast.Name) and "mask" in target.slice.id.lower()
                     or isinstance(target.slice, (ast.UnaryOp, ast.Compare))
                     or isinstance(target.slice, ast.BinOp) and isinstance(target.slice.op, ast.BitOr)) \
                and not isinstance(node.value, (ast.List, ast.Tuple)):
            name = target.value.id
            return ast.Assign([ast.Name(name, ast.Store())], ast.Call(
                ast.Attribute(ast.Name("np", ast.Load()), "where", ast.Load()),
                [target.slice, node.value, ast.Name(name, ast.Load())], []))
        return node


def look_different(notebooks: dict, seed: int = 7) -> dict:
    rng = random.Random(seed)
    renamed = disguise(notebooks, seed=seed)
    return _rewrite_cells(renamed, lambda tree: reorder(_LookDifferent().visit(tree), rng))


# ---- the class ----------------------------------------------------------------------------------------------------

def _short_only(masters: dict, release: dict, short: tuple, seed: int) -> dict:
    """The release with only the short answer cells answered as the master does, names of the author's own."""
    answered = disguise(masters, seed=seed)
    out = copy.deepcopy(release)
    for name, nb in out.items():
        mine = {_grade_id(c): c for c in answer_cells(answered[name])}
        for cell in answer_cells(nb):
            if _grade_id(cell) in short:
                cell["source"] = mine[_grade_id(cell)]["source"]
    return out


def _with_part(base: dict, donor: dict, function: str) -> dict:
    """``base`` with the definition of ``function`` taken word for word from ``donor`` (same answer cell)."""
    out = copy.deepcopy(base)
    for name, nb in out.items():
        donors = {_grade_id(c): cell_source(c) for c in answer_cells(donor[name])}
        for cell in answer_cells(nb):
            source = donors.get(_grade_id(cell), "")
            theirs = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == function]
            if not theirs:
                continue
            lines = source.splitlines()
            copied = "\n".join(lines[theirs[0].lineno - 1:theirs[0].end_lineno])
            mine = cell_source(cell)
            tree = ast.parse(mine)
            own = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
            if own:
                mine_lines = mine.splitlines()
                cell["source"] = "\n".join(mine_lines[:own[0].lineno - 1] + [copied] + mine_lines[own[0].end_lineno:])
            else:
                cell["source"] = mine + "\n\n" + copied
    return out


def _answered(release: dict, handin: dict) -> dict:
    """The release with the answer cells of ``handin`` (the master's notebooks hold its tests: a student's do not)."""
    out = copy.deepcopy(release)
    for name, nb in out.items():
        theirs = {_grade_id(c): c["source"] for c in answer_cells(handin[name])}
        for cell in answer_cells(nb):
            cell["source"] = theirs.get(_grade_id(cell), cell["source"])
    return out


def _halves(first: dict, second: dict) -> dict:
    out = copy.deepcopy(first)
    for name, nb in out.items():
        theirs = {_grade_id(c): c["source"] for c in answer_cells(second[name])}
        cells = list(answer_cells(nb))
        for cell in cells[len(cells) // 2:]:
            cell["source"] = theirs[_grade_id(cell)]
    return out


def build_class(folder: Path, assignment: str) -> Path:
    """A course folder with the release and master of ``assignment`` and the class of the module's docstring."""
    course = folder / assignment
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    catalogue = load_catalogue(catalogue_path(assignment))
    other = next(s for s in catalogue if s.name == OTHER_STYLE[assignment])
    own = next(s for s in catalogue if s.name == "alt-own-style")
    write_class(course, assignment, {"master": COMPLETE, "other-style": other, "own-style": own, "blank": BLANK})
    names = [p.name for p in sorted((course / "source" / assignment).glob("*.ipynb"))]
    read = {who: {n: read_notebook(course / "submitted" / who / assignment / n) for n in names}
            for who in ("master", "other-style", "own-style", "blank")}
    shutil.rmtree(course / "submitted" / "blank")
    for who in ("master", "other-style", "own-style"):  # as a student hands in: the release, answered
        read[who] = _answered(read["blank"], read[who])
    handins = {who: read[who] for who in ("master", "other-style", "own-style")}
    handins.update({
        "idiom-a": _short_only(read["master"], read["blank"], SHORT[assignment], seed=11),
        "idiom-b": _short_only(read["master"], read["blank"], SHORT[assignment], seed=12),
        "copy-part": _with_part(read["other-style"], read["own-style"], PART[assignment]),
        "copy-halves": _halves(read["other-style"], read["own-style"]),
        "copy-port": port(read["own-style"]),
        "copy-rewrite": look_different(read["own-style"]),
    })
    for who, notebooks in handins.items():
        for name, nb in notebooks.items():
            write_notebook(nb, course / "submitted" / who / assignment / name)
    return course
