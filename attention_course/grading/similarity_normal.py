"""Code as the similarity report compares it: everything a student wrote, with what does not change its meaning
undone. Parsed, never run.

**What is read.** Code cells; the bodies of cell magics (``%%writefile``, ``%%capture``, ``%%time``...) and the code
of line magics; code given to ``exec``, ``eval`` or ``compile`` as a constant string; ``.py`` files handed in beside
the notebook (:func:`code_of_handin` in :mod:`.similarity`). A hand-in's code is normalised as one module, so a
helper defined in one cell and used in another is seen as such.

**What is undone**, in this order:

* comments, formatting, docstrings and other bare strings (the code is printed again from its syntax tree);
* dead code: ``pass``, expressions with no effect (a bare name, a constant, an attribute, a call of a pure function
  or of ``print``), asserts and ``if`` of a constant, ``x = x``, ``del``, and in a function, names assigned and
  never read;
* operators written as functions or methods: ``np.matmul``, ``np.dot``, ``torch.matmul``, ``mm``, ``bmm`` as ``@``;
  ``add``, ``subtract``, ``multiply``, ``divide``, ``power`` (NumPy's and PyTorch's names) as ``+ - * / **``; a
  two-operand ``einsum`` that is a matrix product (batched or not, with either operand transposed) as ``@``; the
  square root in any of its forms (``np.sqrt``, ``math.sqrt``, ``x ** 0.5``) as ``sqrt(x)``; ``x * (1 / y)`` and
  ``x * y ** -0.5`` as divisions; a swap of the last two axes in any spelling as ``.T``;
* call forms: a module function that has a method form as the method (``np.sum(x, axis=-1)`` as
  ``x.sum(-1)``), ``dim`` / ``keepdim`` as ``axis`` / ``keepdims``, an axis keyword as the positional argument,
  keyword arguments in name order;
* statement forms: a loop that only appends to a list made just before it as a comprehension; a temporary read
  once put where it is read; a helper whose body is one ``return`` put where it is called (and dropped when nothing
  calls it any more and the release does not name it);
* the order of definitions (a name-free order) and a method's first parameter (``self``).
"""

from __future__ import annotations

import ast
import copy
import re

from .similarity_forms import Forms, module_call
from .similarity_read import parse_code

#: Modules whose functions are written either as ``module.f(x, ...)`` or as a method ``x.f(...)``.
_PURE = {"len", "abs", "int", "float", "str", "bool", "list", "tuple", "dict", "set", "range", "sorted", "sum",
         "min", "max", "round", "repr", "id", "type", "isinstance", "hash", "print", "zip", "enumerate"}


def _name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


# ---- statements -------------------------------------------------------------------------------------------------

def _loads(tree) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            counts[n.id] = counts.get(n.id, 0) + 1
    return counts


def _stores(tree) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            counts[n.id] = counts.get(n.id, 0) + 1
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)) or \
                isinstance(n, ast.AugAssign):  # x[i] = ..., x.a = ..., x += ...: x changes, it is no temporary
            for m in ast.walk(n.target if isinstance(n, ast.AugAssign) else n.value):
                if isinstance(m, ast.Name):
                    counts[m.id] = counts.get(m.id, 0) + 2
        elif isinstance(n, ast.arg):
            counts[n.arg] = counts.get(n.arg, 0) + 2  # a parameter is never a temporary
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            for name in n.names:
                counts[name] = counts.get(name, 0) + 2
    return counts


def _no_effect(node) -> bool:
    """An expression statement that does nothing a reader of the code would miss."""
    if not isinstance(node, ast.Expr):
        return False
    calls = [n for n in ast.walk(node.value) if isinstance(n, ast.Call)]
    if not calls:
        return True
    call = node.value if isinstance(node.value, ast.Call) else None
    if call is None or len(calls) > 1 and _name(call.func) != "print":
        return False
    mod = module_call(call)
    return _name(call.func) in _PURE or (mod is not None and not mod[1].endswith("_") and "seed" not in mod[1])


def _dead(node) -> list | None:
    """What a statement becomes once what does nothing is dropped (None: keep it as it is)."""
    if isinstance(node, (ast.Pass, ast.Delete)) or _no_effect(node):
        return []
    if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant):
        return []
    if isinstance(node, ast.If) and isinstance(node.test, ast.Constant):
        return node.body if node.test.value else node.orelse
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and isinstance(node.value, ast.Name) and node.targets[0].id == node.value.id:
        return []
    return None


def _append_loop(node, name: str):
    """``(element, generators)`` of a loop whose only work is ``name.append(element)`` (nested loops and one
    ``if`` allowed), else None."""
    if not isinstance(node, ast.For) or node.orelse or len(node.body) != 1:
        return None
    gen = ast.comprehension(node.target, node.iter, [], 0)
    inner = node.body[0]
    if isinstance(inner, ast.If) and not inner.orelse and len(inner.body) == 1:
        gen.ifs.append(inner.test)
        inner = inner.body[0]
    if isinstance(inner, ast.For):
        found = _append_loop(inner, name)
        return (found[0], [gen, *found[1]]) if found else None
    call = inner.value if isinstance(inner, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
            and _name(call.func.value) == name and len(call.args) == 1 and not call.keywords:
        return call.args[0], [gen]
    return None


def _counting_while(start, loop) -> ast.For | None:
    """``for i in range(start, n): body`` for ``i = start`` followed by ``while i < n: body; i += 1`` (``i``
    changed nowhere else in the body)."""
    if not (isinstance(start, ast.Assign) and len(start.targets) == 1 and isinstance(start.targets[0], ast.Name)
            and isinstance(loop, ast.While) and not loop.orelse and loop.body):
        return None
    name, test, step = start.targets[0].id, loop.test, loop.body[-1]
    if not (isinstance(test, ast.Compare) and _name(test.left) == name and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Lt) and isinstance(step, ast.AugAssign) and _name(step.target) == name
            and isinstance(step.op, ast.Add) and isinstance(step.value, ast.Constant) and step.value.value == 1):
        return None
    if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
           for s in loop.body[:-1] for n in ast.walk(s)):
        return None
    bounds = [test.comparators[0]] if isinstance(start.value, ast.Constant) and start.value.value == 0 else \
        [start.value, test.comparators[0]]
    return ast.For(ast.Name(name, ast.Store()), ast.Call(ast.Name("range", ast.Load()), bounds, []),
                   loop.body[:-1] or [ast.Pass()], [])


def _comprehensions(body: list) -> list:
    """Counting ``while`` loops as ``for`` loops, and loops that only append to a list just made as comprehensions."""
    body = list(body)
    i = 0
    while i + 1 < len(body):
        loop = _counting_while(body[i], body[i + 1])
        if loop is not None:
            body[i:i + 2] = [loop]
        i += 1
    out, i = [], 0
    while i < len(body):
        node = body[i]
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                (isinstance(node.value, ast.List) and not node.value.elts or
                 isinstance(node.value, ast.Call) and _name(node.value.func) == "list" and not node.value.args) and \
                i + 1 < len(body):
            found = _append_loop(body[i + 1], node.targets[0].id)
            if found:
                out.append(ast.Assign([node.targets[0]], ast.ListComp(found[0], found[1])))
                i += 2
                continue
        out.append(node)
        i += 1
    return out


class _Replace(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.AST], once: bool = False):
        self.values, self.once, self.done = values, once, False

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.values and not (self.once and self.done):
            self.done = True
            return copy.deepcopy(self.values[node.id])
        return node


#: A temporary read more than once (at most this many times) is put where it is read when its value is this small
#: (in syntax-tree nodes): as a helper with one parameter used twice would be, once inlined.
_SMALL_READS, _SMALL_VALUE = 1, 15


def _small(value, defined: set) -> bool:
    """A value small enough to be written again where each read is, and that calls no function of the hand-in's
    own (whose body, put in later, could be large)."""
    nodes = [n for n in ast.walk(value) if isinstance(n, ast.expr)]
    return len(nodes) <= _SMALL_VALUE and not any(isinstance(n, ast.Call) and _name(n.func) in defined for n in nodes)


def _inline_temporaries(func, defined: set = frozenset()) -> None:
    """In a function, a name assigned once (not a parameter) and read once, or a few times if its value is small, is
    put where it is read."""
    for _ in range(4):
        loads, stores = _loads(func), _stores(func)
        once = {n for n, c in loads.items() if stores.get(n) == 1 and c <= _SMALL_READS}
        changed = False
        if not once:
            return
        for block in list(_blocks(func)):
            reads = None
            i = 0
            while i < len(block):
                node = block[i]
                name = node.targets[0].id if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) else None
                if name in once and (loads[name] == 1 or _small(node.value, defined)):
                    if reads is None:  # the names each statement of the block reads, and how often
                        reads = {id(s): _loads(s) for s in block}
                    later = [s for s in block[i + 1:] if name in reads.get(id(s), {})]
                    if later and sum(reads[id(s)][name] for s in later) == loads[name]:
                        for s in later:
                            _Replace({name: node.value}).visit(s)
                            for n, c in _loads(node.value).items():
                                reads[id(s)][n] = reads[id(s)].get(n, 0) + c * reads[id(s)][name]
                        del block[i]
                        once.discard(name)
                        changed = True
                        continue
                i += 1
        if not changed:
            return


def _blocks(tree):
    for n in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(n, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _drop_unread(func) -> None:
    """In a function, assignments to names that nothing reads."""
    for _ in range(10):
        loads = _loads(func)
        changed = False
        for block in _blocks(func):
            keep = [n for n in block if not (isinstance(n, ast.Assign) and all(
                isinstance(t, ast.Name) and not loads.get(t.id) for t in n.targets))]
            if len(keep) != len(block):
                block[:] = keep or [ast.Pass()]
                changed = True
        if not changed:
            return


class _Statements(ast.NodeTransformer):
    """Docstrings, dead code, comprehensions, temporaries (see the module's docstring). ``defined``: the names of
    the hand-in's own functions."""

    def __init__(self, defined: set = frozenset()):
        self.defined = defined

    def _clean(self, body: list) -> list:
        body = [self.visit(node) for node in body
                if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) or
                        isinstance(node, (ast.Import, ast.ImportFrom)))]
        out = []
        for node in body:
            if node is None:
                continue
            for one in node if isinstance(node, list) else [node]:
                dead = _dead(one)
                out += [one] if dead is None else self._clean(dead)
        return _comprehensions(out)

    def _body(self, body: list) -> list:
        return self._clean(body) or [ast.Pass()]

    def generic_visit(self, node):
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, name, None), list) and getattr(node, name) and \
                    isinstance(getattr(node, name)[0], ast.stmt):
                setattr(node, name, self._body(getattr(node, name)))
        for handler in getattr(node, "handlers", []) or []:
            handler.body = self._body(handler.body)
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        _drop_unread(node)
        _inline_temporaries(node, self.defined)
        node.body = _comprehensions(node.body) or [ast.Pass()]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def _straight(func) -> tuple[list, ast.AST] | None:
    """``(assignments, returned value)`` of a helper whose body is assignments to plain names and then one
    ``return`` (a one-``return`` helper has no assignments), else None."""
    if not isinstance(func, ast.FunctionDef) or func.args.vararg or func.args.kwarg or func.args.kwonlyargs or \
            func.args.defaults or func.decorator_list or not func.body or not isinstance(func.body[-1], ast.Return) \
            or func.body[-1].value is None:
        return None
    head = func.body[:-1]
    if not all(isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets) for n in head):
        return None
    return head, func.body[-1].value


def _one_return(func) -> ast.AST | None:
    if isinstance(func, ast.FunctionDef) and len(func.body) == 1 and isinstance(func.body[0], ast.Return) and \
            func.body[0].value is not None and not (func.args.vararg or func.args.kwarg or func.args.kwonlyargs or
                                                    func.args.defaults or func.decorator_list):
        return func.body[0].value
    return None


def _inline_helpers(tree: ast.Module, api: set[str]) -> list:
    """A function whose body is one ``return`` is put where it is called; dropped when nothing else calls it and the
    release does not name it."""
    helpers = {f.name: f for f in tree.body if _straight(f) is not None}
    inlined: set[str] = set()

    class Inline(ast.NodeTransformer):
        """Puts helpers where they are called in one statement's own expressions; an argument that the helper
        reads more than once and that is not a plain name becomes a temporary before the statement (as a student
        who inlines the helper by hand writes it). A call inside a comprehension or lambda is left when it would
        need one."""
        changed = False
        count = 0

        def __init__(self, inside: str):
            self.inside, self.pending, self.depth = inside, [], 0

        def visit_Lambda(self, node):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
            return node

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

        def visit_Call(self, node):
            self.generic_visit(node)
            helper = helpers.get(_name(node.func))
            if helper is None or helper.name == self.inside:
                return node
            params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
            given = dict(zip(params, node.args))
            given.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
            if len(node.args) > len(params) or set(given) != set(params):
                return node
            head, body = _straight(helper)
            uses = _loads(ast.Module([*head, ast.Expr(body)], []))
            complex_args = [p for p in params if uses.get(p, 0) > 1 and not isinstance(given[p], (ast.Name, ast.Constant))]
            if (complex_args or head) and self.depth:
                return node
            for p in complex_args:
                Inline.count += 1
                name = f"_arg{Inline.count}"
                self.pending.append(ast.Assign([ast.Name(name, ast.Store())], given[p]))
                given[p] = ast.Name(name, ast.Load())
            for local in {t.id for n in head for t in n.targets}:  # the helper's own names, made fresh
                Inline.count += 1
                given[local] = ast.Name(f"_local{Inline.count}", ast.Load())
            for n in copy.deepcopy(head):
                n.value = _Replace(given).visit(n.value)
                n.targets = [ast.Name(given[t.id].id, ast.Store()) for t in n.targets]
                self.pending.append(n)
            Inline.changed = True
            inlined.add(helper.name)
            return _Replace(given).visit(copy.deepcopy(body))

    def inline_block(block: list, inside: str) -> None:
        i = 0
        while i < len(block):
            stmt = block[i]
            visitor = Inline(inside)
            for field, value in ast.iter_fields(stmt):
                if isinstance(value, ast.expr):
                    setattr(stmt, field, visitor.visit(value))
                elif isinstance(value, list) and value and not isinstance(value[0], ast.stmt):
                    setattr(stmt, field, [visitor.visit(v) if isinstance(v, ast.AST) else v for v in value])
            block[i:i] = visitor.pending
            i += len(visitor.pending) + 1

    changed: list = []
    if not helpers:
        helpers = {}
    for _ in range(3):
        Inline.changed = False
        for node in list(tree.body):
            before = Inline.changed
            Inline.changed = False
            inside = getattr(node, "name", "")
            for block in list(_blocks(node)):  # the blocks inside a definition or a compound statement
                inline_block(block, inside)
            if Inline.changed and node not in changed:
                changed.append(node)
            Inline.changed = Inline.changed or before
        top = Inline.changed
        Inline.changed = False
        inline_block(tree.body, "")  # statements at the top level
        if not (Inline.changed or top):
            break
    called = _loads(ast.Module([n for n in tree.body if getattr(n, "name", None) not in helpers], []))
    tree.body = [n for n in tree.body if getattr(n, "name", None) not in inlined or n.name in api or called.get(n.name)]
    # and a function or class of the hand-in's own that nothing names (dead code) is dropped
    named = _loads(tree)
    tree.body = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 or not api or n.name in api or named.get(n.name)]  # (no API known: one cell alone, all kept)
    return [n for n in changed if n in tree.body]


# ---- order ----

class _Order(ast.NodeTransformer):
    """Puts each run of consecutive definitions in a name-free order; a method's first parameter is `self`."""

    def _body(self, body: list) -> list:
        body = [self.visit(node) for node in body]
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


def normalise_all(sources: list[str], api: frozenset = frozenset()) -> str:
    """A hand-in's code (its cells' and files' sources) as one normalised text (see the module's docstring). ``api``:
    the names the release defines, which are never dropped. Code that does not parse is kept as written, after the
    rest (copydetect's tokeniser still reads it)."""
    body, raw = [], []
    for source in sources:
        statements = parse_code(source)
        if statements is None:
            raw.append(source.strip())
        else:
            body += statements
    try:
        defined = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        tree = Forms().visit(ast.Module(body, []))
        tree = _Statements(defined).visit(tree)
        for node in _inline_helpers(tree, set(api)):  # what a helper was put into is looked at again
            i = tree.body.index(node)
            again = _Statements(defined)._body([Forms().visit(node)])
            tree.body[i:i + 1] = again
        tree = Forms().visit(tree)  # forms that inlining brought together (x * (1 / sqrt(d)) from a temporary)
        # names assigned at the top level or in a class that nothing reads and the release does not name
        read = set(_loads(tree)) | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for owner in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            owner.body = [n for n in owner.body if not (isinstance(n, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id not in read and t.id not in api for t in n.targets))] or [ast.Pass()]
        tree.body = _Order()._body(tree.body) if tree.body else []
        text = ast.unparse(ast.fix_missing_locations(tree)).strip()
    except (RecursionError, ValueError, TypeError, AttributeError):
        return "\n\n".join(s.strip() for s in sources if s.strip())
    return "\n\n".join([t for t in [text, *raw] if t and t != "pass"])


def normalise(source: str) -> str:
    """One cell's code, normalised (:func:`normalise_all` of it alone)."""
    return normalise_all([source])
