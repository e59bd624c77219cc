"""Disguised copies of a hand-in, the ways students disguise code, for the similarity report's tests and bench.

Each kind rewrites every answer cell of a hand-in (the cells nbgrader marks as solutions) and keeps what it
computes:

* ``names``: every local name renamed (parameters kept: callers name them), comments dropped, docstrings
  replaced, functions reordered
  (:func:`tools.submissions.disguise`);
* ``restyle``: comprehensions written as loops and loops that append as comprehensions, in each function one
  expression moved into a helper function of its own, conditional expressions as ``if`` statements and back, and
  some functions' bodies in an inner function they call;
* ``pad``: a harmless statement after every statement (``_ = None``, ``assert True``, an unused name...), each
  computed value times 1, and each function's body in ``try: ... except Exception: raise``;
* ``functional``: operators as functions (``np.matmul``, ``torch.add``...), matrix products in PyTorch as
  ``torch.einsum``, ``x / sqrt(d)`` as ``x * (1 / sqrt(d))``, an axis keyword as a positional argument;
* ``reorder``: adjacent independent assignments swapped or merged into one tuple assignment, tuple assignments
  split, ``x = x + y`` written ``x += y``, the operands of ``+`` and ``*`` swapped (``b + X @ W``), comparisons
  turned round (``n > i`` for ``i < n``);
* ``box``: each cell's functions put in a class as static methods (or as methods of an instance that call each
  other through it, ``this.g(...)``), their names bound again after it (``f = _Answers.f``);
* ``combined``: all of the above;
* ``writefile``: the answers written into a module by a ``%%writefile`` cell, which each answer cell runs in the
  notebook's namespace (``%run -i``).
"""

from __future__ import annotations

import ast
import copy
import random

from attention_course.grading.cells import cell_source

KINDS = ("names", "restyle", "pad", "functional", "reorder", "box", "combined", "writefile")
_MODULE = "attention_impl"


def _answer_cells(nb: dict):
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            yield cell


class _Blocks(ast.NodeTransformer):
    """Rewrites every block of statements (a body, an ``else``) with ``_block``, after visiting its statements."""

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(node, field, self._block(block))
        return node

    def _block(self, block: list) -> list:
        return block


# ---- restyle ----------------------------------------------------------------------------------------------------

class _Restyle(_Blocks):
    def __init__(self, rng):
        self.rng, self.helpers, self.count, self.scopes = rng, [], 0, []

    def _block(self, body):  # (its statements were visited by generic_visit)
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

    def visit_FunctionDef(self, node):
        bound = {a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs} | \
            {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.scopes.append(bound)
        self.generic_visit(node)
        self.scopes.pop()
        local = set().union(bound, *self.scopes)  # names of this function and of those it is nested in
        for stmt in node.body:  # the first assignment of a computed value: into a helper of its own
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.BinOp, ast.Call)):
                inner = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                inner |= {a.arg for n in ast.walk(stmt.value) if isinstance(n, ast.Lambda) for a in n.args.args}
                free = sorted({n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and n.id in local} - inner)
                if len(free) >= 1:
                    self.count += 1
                    name = f"_step_{node.name}_{self.count}"
                    args = ast.arguments([], [ast.arg(f) for f in free], None, [], [], None, [])
                    self.helpers.append(ast.FunctionDef(name=name, args=args, body=[ast.Return(stmt.value)],
                                                        decorator_list=[], returns=None, type_comment=None))
                    stmt.value = ast.Call(ast.Name(name, ast.Load()), [ast.Name(f, ast.Load()) for f in free], [])
                    break
        return node


class _Conditionals(_Blocks):
    """``x = a if c else b`` as an ``if`` statement; ``if c: x = f(x)`` as ``x = f(x) if c else x``."""

    def _block(self, block: list) -> list:
        return [self._one(s) for s in block]

    @staticmethod
    def _one(node):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.IfExp):
            return ast.If(node.value.test, [ast.Assign(node.targets, node.value.body)],
                          [ast.Assign(copy.deepcopy(node.targets), node.value.orelse)])
        if isinstance(node, ast.If) and not node.orelse and len(node.body) == 1 and isinstance(node.body[0], ast.Assign) \
                and len(node.body[0].targets) == 1 and isinstance(node.body[0].targets[0], ast.Name):
            name = node.body[0].targets[0].id
            return ast.Assign([ast.Name(name, ast.Store())],
                              ast.IfExp(node.test, node.body[0].value, ast.Name(name, ast.Load())))
        return node


def _wrapped(func: ast.FunctionDef) -> ast.FunctionDef:
    """A top-level function whose body is an inner function it defines and returns called with its parameters."""
    args = func.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or func.decorator_list:
        return func
    inner = ast.FunctionDef(name="_body", args=copy.deepcopy(args), body=func.body, decorator_list=[], returns=None,
                            type_comment=None)
    call = ast.Call(ast.Name("_body", ast.Load()), [ast.Name(a.arg, ast.Load()) for a in args.args], [])
    func.body = [inner, ast.Return(call)]
    return func


def restyle(tree: ast.Module, rng) -> ast.Module:
    t = _Restyle(rng)
    tree = _Conditionals().visit(t.visit(tree))
    tree.body = t.helpers + [_wrapped(n) if isinstance(n, ast.FunctionDef) and rng.random() < 0.5 else n
                             for n in tree.body]
    return tree


# ---- pad --------------------------------------------------------------------------------------------------------

_HARMLESS = ["_ = None", "assert True", "unused_{n} = 0", "_tmp{n} = len([])", "if False:\n    print('debug {n}')",
             "None", "pass"]


class _Pad(_Blocks):
    def __init__(self, rng):
        self.rng, self.n = rng, 0

    def _block(self, block: list) -> list:
        out = []
        for stmt in block:
            out.append(stmt)
            if isinstance(stmt, ast.Return):
                continue
            self.n += 1
            out += ast.parse(self.rng.choice(_HARMLESS).format(n=self.n)).body
        return out


class _Units(ast.NodeTransformer):
    """A computed number times 1 (``x = (a @ b + c) * 1``)."""

    def visit_Assign(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.BinOp) and isinstance(node.value.op, (ast.Add, ast.Sub, ast.Mult, ast.Div,
                                                                            ast.MatMult)):
            node.value = ast.BinOp(node.value, ast.Mult(), ast.Constant(1))
        return node


def pad(tree: ast.Module, rng) -> ast.Module:
    tree = _Units().visit(_Pad(rng).visit(tree))
    for node in ast.walk(tree):  # and each function's body in a try whose handler raises again
        if isinstance(node, ast.FunctionDef):
            node.body = [ast.Try(node.body, [ast.ExceptHandler(ast.Name("Exception", ast.Load()), None, [ast.Raise()])],
                                 [], [])]
    return tree


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
            return ast.BinOp(node.left, ast.Mult(), ast.BinOp(ast.Constant(1), ast.Div(), node.right))
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


# ---- reorder ----------------------------------------------------------------------------------------------------

def _stored(node) -> set:
    """The names a statement rebinds or changes (the object of ``x[i] = ...`` and ``x.a = ...`` too)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
            out |= {m.id for m in ast.walk(n.value) if isinstance(m, ast.Name)}
    return out


def _loaded(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _independent(a, b) -> bool:
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign)
    return isinstance(a, simple) and isinstance(b, simple) and not _stored(a) & (_stored(b) | _loaded(b)) \
        and not _stored(b) & _loaded(a)


class _Reorder(_Blocks):
    """Adjacent independent assignments swapped, or merged into one tuple assignment; tuple assignments split; and
    ``x = x + y`` written ``x += y``."""

    def __init__(self, rng):
        self.rng = rng

    def _block(self, block: list) -> list:
        out, i = [], 0
        while i < len(block):
            a = block[i]
            b = block[i + 1] if i + 1 < len(block) else None
            if b is not None and _independent(a, b):
                plain = all(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                            for s in (a, b))
                if plain and self.rng.random() < 0.5:
                    out.append(ast.Assign([ast.Tuple([b.targets[0], a.targets[0]], ast.Store())],
                                          ast.Tuple([b.value, a.value], ast.Load())))
                else:
                    out += [b, a]
                i += 2
                continue
            if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Tuple) \
                    and isinstance(a.value, ast.Tuple) and len(a.value.elts) == len(a.targets[0].elts) \
                    and all(isinstance(t, ast.Name) for t in a.targets[0].elts) \
                    and not {t.id for t in a.targets[0].elts} & _loaded(a.value):
                out += [ast.Assign([t], v) for t, v in zip(a.targets[0].elts, a.value.elts)]
            elif isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) \
                    and isinstance(a.value, ast.BinOp) and isinstance(a.value.left, ast.Name) \
                    and a.value.left.id == a.targets[0].id:
                out.append(ast.AugAssign(ast.Name(a.targets[0].id, ast.Store()), a.value.op, a.value.right))
            else:
                out.append(a)
            i += 1
        return out

    def visit_BinOp(self, node):
        """``X @ W + b`` as ``b + X @ W``, ``2 * x`` as ``x * 2``: operands swapped where one is a matrix product or
        a number (so neither is a list, a tuple or a string, which do not commute)."""
        self.generic_visit(node)
        swappable = lambda x: isinstance(x, ast.BinOp) and isinstance(x.op, ast.MatMult) or \
            isinstance(x, ast.Constant) and type(x.value) in (int, float)  # noqa: E731
        if isinstance(node.op, (ast.Add, ast.Mult)) and (swappable(node.left) or swappable(node.right)) \
                and self.rng.random() < 0.7:
            node.left, node.right = node.right, node.left
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
        if len(node.ops) == 1 and type(node.ops[0]) in flipped:
            return ast.Compare(node.comparators[0], [flipped[type(node.ops[0])]()], [node.left])
        return node


def reorder(tree: ast.Module, rng) -> ast.Module:
    return _Reorder(rng).visit(tree)


# ---- box --------------------------------------------------------------------------------------------------------

def box(tree: ast.Module, rng) -> ast.Module:
    """The cell's functions as static methods of a class (or methods of an instance that never read ``self``),
    each name bound again at the top level after it."""
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list]
    if not functions:
        return tree
    instance = rng.random() < 0.5
    names = {f.name for f in functions}
    for f in functions:
        if instance:  # methods of an instance, calling each other through it
            for node in ast.walk(f):
                for field, value in ast.iter_fields(node):
                    if isinstance(value, ast.Name) and value.id in names and isinstance(value.ctx, ast.Load):
                        setattr(node, field, ast.Attribute(ast.Name("this", ast.Load()), value.id, ast.Load()))
                    elif isinstance(value, list):
                        value[:] = [ast.Attribute(ast.Name("this", ast.Load()), v.id, ast.Load())
                                    if isinstance(v, ast.Name) and v.id in names and isinstance(v.ctx, ast.Load)
                                    else v for v in value]
            f.args.args.insert(0, ast.arg("this"))
        else:
            f.decorator_list.append(ast.Name("staticmethod", ast.Load()))
    owner = ast.Name("_Answers", ast.Load())
    rest = [n for n in tree.body if n not in functions]
    head = [ast.ClassDef("_Answers", [], [], functions, [])]
    if instance:
        head.append(ast.parse("_answers = _Answers()").body[0])
        owner = ast.Name("_answers", ast.Load())
    aliases = [ast.Assign([ast.Name(f.name, ast.Store())], ast.Attribute(owner, f.name, ast.Load())) for f in functions]
    tree.body = head + aliases + rest
    return tree


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
            for step in (("functional", "restyle", "reorder", "pad", "box") if kind == "combined" else (kind,)):
                tree = {"restyle": lambda t: restyle(t, rng), "pad": lambda t: pad(t, rng),
                        "functional": lambda t: functional(t, rng, module), "reorder": lambda t: reorder(t, rng),
                        "box": lambda t: box(t, rng)}[step](tree)
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
        for cell in answers:  # run in the notebook's namespace: the answers see what the notebook defines
            cell["source"] = f"%run -i {_MODULE}.py"
    return out
