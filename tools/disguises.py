"""Disguised copies of a hand-in, the ways students disguise code, for the similarity report's tests and bench.

Each kind rewrites every answer cell of a hand-in (the cells nbgrader marks as solutions) and keeps what it
computes:

* ``names``: every local name renamed, comments dropped, docstrings replaced, functions reordered
  (:func:`tools.submissions.disguise`);
* ``restyle``: comprehensions written as loops and loops that append as comprehensions, and in each function one
  expression moved into a helper function of its own;
* ``pad``: a harmless statement after every statement (``_ = None``, ``assert True``, an unused name...);
* ``functional``: operators as functions (``np.matmul``, ``torch.add``...), matrix products in PyTorch as
  ``torch.einsum``, ``x / sqrt(d)`` as ``x * (1 / np.sqrt(d))``, an axis keyword as a positional argument;
* ``combined``: all of the above;
* ``writefile``: the answers written into a module by a ``%%writefile`` cell, which each answer cell imports.
"""

from __future__ import annotations

import ast
import copy
import random

from attention_course.grading.cells import cell_source

KINDS = ("names", "restyle", "pad", "functional", "combined", "writefile")
_MODULE = "attention_impl"


def _answer_cells(nb: dict):
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            yield cell


# ---- restyle ----------------------------------------------------------------------------------------------------

class _Restyle(ast.NodeTransformer):
    def __init__(self, rng):
        self.rng, self.helpers, self.count = rng, [], 0

    def _body(self, body):  # (its statements were visited by generic_visit)
        out = []
        for node in body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.ListComp):
                name = node.targets[0].id
                inner = ast.Expr(ast.Call(ast.Attribute(ast.Name(name, ast.Load()), "append", ast.Load()),
                                          [node.value.elt], []))
                for gen in reversed(node.value.generators):
                    for test in reversed(gen.ifs):
                        inner = ast.If(test, [inner], [])
                    inner = ast.For(gen.target, gen.iter, [inner], [])
                out += [ast.Assign([ast.Name(name, ast.Store())], ast.List([], ast.Load())), inner]
            else:
                out.append(node)
        return out

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(node, field, self._body(block))
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        local = {a.arg for a in node.args.args} | {n.id for n in ast.walk(node)
                                                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for stmt in node.body:  # the first assignment of a computed value: into a helper of its own
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.BinOp, ast.Call)):
                free = sorted({n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and n.id in local})
                if len(free) >= 1:
                    self.count += 1
                    name = f"_step_{node.name}_{self.count}"
                    args = ast.arguments([], [ast.arg(f) for f in free], None, [], [], None, [])
                    self.helpers.append(ast.FunctionDef(name=name, args=args, body=[ast.Return(stmt.value)],
                                                        decorator_list=[], returns=None, type_comment=None))
                    stmt.value = ast.Call(ast.Name(name, ast.Load()), [ast.Name(f, ast.Load()) for f in free], [])
                    break
        return node


def restyle(tree: ast.Module, rng) -> ast.Module:
    t = _Restyle(rng)
    tree = t.visit(tree)
    tree.body = t.helpers + tree.body
    return tree


# ---- pad --------------------------------------------------------------------------------------------------------

_HARMLESS = ["_ = None", "assert True", "unused_{n} = 0", "_tmp{n} = len([])", "if False:\n    print('debug {n}')",
             "None", "pass"]


class _Pad(ast.NodeTransformer):
    def __init__(self, rng):
        self.rng, self.n = rng, 0

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                out = []
                for stmt in block:
                    out.append(stmt)
                    if isinstance(stmt, ast.Return):
                        continue
                    self.n += 1
                    out += ast.parse(self.rng.choice(_HARMLESS).format(n=self.n)).body
                setattr(node, field, out)
        return node


def pad(tree: ast.Module, rng) -> ast.Module:
    return _Pad(rng).visit(tree)


# ---- functional -------------------------------------------------------------------------------------------------

def _call(module: str, name: str, *args) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name(module, ast.Load()), name, ast.Load()), list(args), [])


class _Functional(ast.NodeTransformer):
    def __init__(self, module: str):
        self.module = module

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult):
            if self.module == "torch":
                right, spec = node.right, "...ij,...jk->...ik"
                if isinstance(right, ast.Attribute) and right.attr in ("T", "mT"):
                    right, spec = right.value, "...ij,...kj->...ik"
                return _call("torch", "einsum", ast.Constant(spec), node.left, right)
            return _call("np", "matmul", node.left, node.right)
        if isinstance(node.op, ast.Div) and isinstance(node.right, ast.Call) and \
                isinstance(node.right.func, ast.Attribute) and node.right.func.attr == "sqrt":
            return ast.BinOp(node.left, ast.Mult(), ast.BinOp(ast.Constant(1), ast.Div(),
                                                              _call(self.module, "sqrt", *node.right.args)))
        names = {ast.Add: "add", ast.Mult: "multiply" if self.module == "np" else "mul"}
        if type(node.op) in names and not any(isinstance(x, ast.Constant) for x in (node.left, node.right)):
            return _call(self.module, names[type(node.op)], node.left, node.right)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        axis = next((kw for kw in node.keywords if kw.arg in ("axis", "dim")), None)
        if axis is not None and isinstance(node.func, ast.Attribute):
            module_call = isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "torch", "F")
            if len(node.args) == (1 if module_call else 0):
                node.args.append(axis.value)
                node.keywords.remove(axis)
        return node


def functional(tree: ast.Module, rng, module: str) -> ast.Module:
    return _Functional(module).visit(tree)


# ---- the kinds --------------------------------------------------------------------------------------------------

def disguised(notebooks: dict[str, dict], kind: str, seed: int = 0) -> dict[str, dict]:
    """A copy of ``notebooks`` (file name -> notebook) disguised the ``kind`` way (see the module's docstring)."""
    from tools.submissions import disguise

    if kind == "names":
        return disguise(notebooks, seed=seed)
    if kind == "writefile":
        return _writefile(notebooks)
    rng = random.Random(seed)
    out = disguise(notebooks, seed=seed) if kind == "combined" else copy.deepcopy(notebooks)
    for nb in out.values():
        for cell in _answer_cells(nb):
            source = cell_source(cell)
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            module = "torch" if "torch." in source and "np." not in source else "np"
            for step in (("functional", "restyle", "pad") if kind == "combined" else (kind,)):
                tree = {"restyle": lambda t: restyle(t, rng), "pad": lambda t: pad(t, rng),
                        "functional": lambda t: functional(t, rng, module)}[step](tree)
            cell["source"] = ast.unparse(ast.fix_missing_locations(tree))
    return out


def _writefile(notebooks: dict[str, dict]) -> dict[str, dict]:
    out = copy.deepcopy(notebooks)
    for nb in out.values():
        answers = list(_answer_cells(nb))
        if not answers:
            continue
        imports = []
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and cell not in answers:
                try:
                    imports += [ast.unparse(n) for n in ast.parse(cell_source(cell)).body
                                if isinstance(n, (ast.Import, ast.ImportFrom))]
                except SyntaxError:
                    continue
        module = "\n".join(dict.fromkeys(imports)) + "\n\n" + "\n\n".join(cell_source(c) for c in answers)
        first = nb["cells"].index(answers[0])
        nb["cells"].insert(first, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                   "source": f"%%writefile {_MODULE}.py\n{module}\n"})
        for cell in answers:
            cell["source"] = f"from {_MODULE} import *"
    return out
