"""The similarity normaliser's statement passes (see :mod:`.normal`): what a student can do to the order
and grouping of statements without changing what the code computes.

* :func:`hoist_namespaces`: a class used only as a box of functions (static methods, class methods or methods that
  read their first parameter only to call each other; no base class, no state), with the module's names bound to it or to an
  instance of it, is undone: its functions are put at the top level and ``Box.f`` / ``box.f`` read as ``f``;
* :func:`split_tuples`: ``a, b = x, y`` as ``a = x`` then ``b = y`` (when ``y`` does not read ``a``);
  :func:`conditional_values`: an ``if``/``else`` that assigns one name as ``x = a if c else b``;
  :func:`unwrap_inner`: a function that only defines an inner function and returns it called, as its body;
  :func:`plain_augmented`: ``x += y`` as ``x = x + y``;
* :func:`canonical_order`: a run of statements that do not depend on each other's names is put in a name-free
  order that keeps every dependency (each statement after what it reads, what reads what it overwrites, and
  what it overwrites), so swapping independent lines does not help.
"""

from __future__ import annotations

import ast
import copy

from .forms import name_of

_WRAPPERS = {"staticmethod", "classmethod"}


# ---- classes used as a box of functions --------------------------------------------------------------------------

def _box(node) -> dict | None:
    """The functions of a class used only as a box of them (name -> (function, whether its first parameter is a
    ``cls`` or a ``self`` read only as ``self.g``, which hoisting drops)), or None."""
    if not isinstance(node, ast.ClassDef) or node.bases or node.keywords or node.decorator_list:
        return None
    functions = {}
    for item in node.body:
        if isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant) or isinstance(item, ast.Pass):
            continue
        if not isinstance(item, ast.FunctionDef) or item.name.startswith("__"):
            return None
        wrappers = {name_of(d) for d in item.decorator_list}
        if not wrappers <= _WRAPPERS or len(item.decorator_list) > 1:
            return None
        functions[item.name] = (item, "staticmethod" not in wrappers)
    if not functions:
        return None
    for item, bound in functions.values():
        if bound:  # a method or a class method: its first parameter is read only to call the box's functions
            if not item.args.args:
                return None
            first = item.args.args[0].arg
            uses = sum(isinstance(n, ast.Name) and n.id == first for n in ast.walk(item))
            calls = sum(isinstance(n, ast.Attribute) and name_of(n.value) == first and n.attr in functions
                        for n in ast.walk(item))
            if uses != calls:
                return None
    return functions


class _Unbox(ast.NodeTransformer):
    """``Box.f``, ``Box().f`` and ``box.f`` (``box = Box()``) read as ``f``."""

    def __init__(self, owners: dict[str, set]):
        self.owners = owners

    def visit_Attribute(self, node):
        self.generic_visit(node)
        owner = name_of(node.value)
        if isinstance(node.value, ast.Call) and not node.value.args and not node.value.keywords:
            owner = name_of(node.value.func)  # Box().f
        if isinstance(node.ctx, ast.Load) and owner in self.owners and node.attr in self.owners[owner]:
            return ast.copy_location(ast.Name(node.attr, ast.Load()), node)
        return node


def hoist_namespaces(tree: ast.Module) -> ast.Module:
    """Classes used only as a box of functions, undone (see the module's docstring)."""
    found = [(node, _box(node)) for node in tree.body if isinstance(node, ast.ClassDef)]
    found = {id(node): functions for node, functions in found if functions is not None}
    if not found:
        return tree
    owners: dict[str, set] = {}  # a box's name (a class redefined: every box of that name) -> its functions
    for node in tree.body:
        if id(node) in found:
            owners.setdefault(node.name, set()).update(found[id(node)])
    boxes = set(owners)
    for node in tree.body:  # box = Box(): an instance of a box is the box
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and name_of(node.value.func) in boxes \
                and not node.value.args and not node.value.keywords:
            owners[node.targets[0].id] = owners[node.value.func.id]
    body = []
    for node in tree.body:
        if id(node) in found:
            for item, bound in found[id(node)].values():
                item.decorator_list = []
                if bound:  # self.g(...) as g(...)
                    item = _Unbox({item.args.args[0].arg: set(found[id(node)])}).visit(item)
                    item.args.args = item.args.args[1:]
                body.append(item)
        elif isinstance(node, ast.Assign) and name_of(node.targets[0]) in owners and len(node.targets) == 1 \
                and isinstance(node.value, ast.Call) and name_of(node.value.func) in boxes:
            continue  # the instance itself
        else:
            body.append(node)
    tree.body = body
    return _Unbox(owners).visit(tree)


# ---- tuple assignments -------------------------------------------------------------------------------------------

def split_tuples(body: list) -> list:
    """``a, b = x, y`` as two assignments, where the targets are distinct names or attributes (``self.a``) and no
    value reads the target of a value before it (``a, b = f(a), g(b)`` is ``a = f(a)`` then ``b = g(b)``)."""
    out = []
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) \
                and isinstance(node.value, ast.Tuple) and len(node.targets[0].elts) == len(node.value.elts):
            names = [_chain(t) for t in node.targets[0].elts]
            reads = [_reads(v) for v in node.value.elts]  # value i may read its own target, not an earlier one
            if None not in names and len(set(names)) == len(names) \
                    and not any(_conflict(a, b) or a == b for i, r in enumerate(reads) for a in names[:i] for b in r) \
                    and not any(isinstance(v, ast.Starred) for v in node.value.elts):
                out += [ast.Assign([t], v) for t, v in zip(node.targets[0].elts, node.value.elts)]
                continue
        out.append(node)
    return out


def _read(target):
    """An assignment's target as an expression that reads it (a copy)."""
    read = copy.deepcopy(target)
    for n in ast.walk(read):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return read


def plain_augmented(body: list) -> list:
    """``x += y`` (and every augmented assignment to a name, an attribute or an element) as ``x = x + y``."""
    out = []
    for node in body:
        if isinstance(node, ast.AugAssign) and isinstance(node.target, (ast.Name, ast.Attribute, ast.Subscript)):
            node = ast.Assign([node.target], ast.BinOp(_read(node.target), node.op, node.value))
        out.append(node)
    return out


def conditional_values(body: list) -> list:
    """``if c: x = a`` / ``else: x = b`` as ``x = a if c else b`` (one assignment to one name or attribute in each
    branch; no ``else``: ``x = a if c else x``)."""
    out = []
    for node in body:
        if isinstance(node, ast.If) and node.orelse and all(isinstance(n, ast.Pass) for n in node.body):
            node = ast.If(ast.UnaryOp(ast.Not(), node.test), node.orelse, [])  # if c: pass / else: B as if not c: B
        if isinstance(node, ast.If) and len(node.body) == 1 and len(node.orelse) <= 1:
            then, other = node.body[0], node.orelse[0] if node.orelse else None
            target = _single_target(then)
            if target is not None and (other is None or _single_target(other) == target):
                orelse = other.value if other is not None else _read(then.targets[0])
                node = ast.Assign([then.targets[0]], ast.IfExp(node.test, then.value, orelse))
        out.append(node)
    return out


def _single_target(node) -> str | None:
    """The name or attribute chain (``self.pos``) a statement assigns alone, else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return _chain(node.targets[0])
    return None


def unwrap_inner(func) -> None:
    """A function whose body only defines an inner function and returns it called with names (``def f(x): def
    g(y): ...; return g(x)``) as the inner function's body, its parameters renamed to those names."""
    if len(func.body) != 2 or not isinstance(func.body[0], ast.FunctionDef) or func.body[0].decorator_list:
        return
    inner, ret = func.body
    call = ret.value if isinstance(ret, ast.Return) else None
    params = [a.arg for a in inner.args.args]
    if not (isinstance(call, ast.Call) and name_of(call.func) == inner.name and not call.keywords
            and len(call.args) == len(params) and all(isinstance(a, ast.Name) for a in call.args)
            and not inner.args.vararg and not inner.args.kwarg and not inner.args.kwonlyargs):
        return
    names = dict(zip(params, (a.id for a in call.args)))
    for n in ast.walk(inner):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]
    func.body = inner.body


# ---- the order of independent statements -------------------------------------------------------------------------

_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)
#: The longest run of statements put in order (the pairs of a run are compared: a flood of statements is left as
#: it was written).
RUN_LIMIT = 64


def _chain(node) -> str | None:
    """``x``, ``x.a`` or ``x.a.b`` for a name or a chain of attributes of a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _reads(node) -> set:
    """The names and attribute chains an expression reads."""
    chain = _chain(node)
    if chain is not None:
        return {chain}
    return set().union(*(_reads(child) for child in ast.iter_child_nodes(node)))


def _target(node) -> tuple[set, set]:
    """What storing into a target changes (``x``, ``x.a``; ``x[]``: some elements of ``x``) and what it reads."""
    chain = _chain(node)
    if chain is not None:
        return {chain}, set()
    if isinstance(node, ast.Subscript) and _chain(node.value) is not None:
        return {_chain(node.value) + "[]"}, _reads(node.slice)
    if isinstance(node, (ast.Tuple, ast.List, ast.Starred)):
        parts = [_target(e) for e in (node.elts if not isinstance(node, ast.Starred) else [node.value])]
        return set().union(*(c for c, _ in parts)), set().union(*(r for _, r in parts))
    return set(), _reads(node)


def _names(node) -> tuple[set, set]:
    """What a statement reads and what it changes; an expression statement changes what it reads (a call such as
    ``x.append(...)`` may change its object)."""
    if isinstance(node, ast.Expr):
        read = _reads(node.value)
        return read, set(read)
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    changed, read = set(), _reads(node.value) if node.value is not None else set()
    for target in targets:
        c, r = _target(target)
        changed |= c
        read |= r
    if isinstance(node, ast.AugAssign):
        read |= changed
    return read, changed


def _conflict(a: str, b: str) -> bool:
    """Whether two names touch the same thing: equal (stores into elements of one array commute), or one a part
    of the other (``x`` and ``x.a``, ``x`` and ``x[]``)."""
    if a == b:
        return not a.endswith("[]")
    return b.startswith((a + ".", a + "[")) or a.startswith((b + ".", b + "["))


def _depends(earlier: tuple[set, set], later: tuple[set, set]) -> bool:
    (read_a, changed_a), (read_b, changed_b) = earlier, later
    return any(_conflict(a, b) for a in changed_a for b in read_b | changed_b) or \
        any(_conflict(a, b) for a in read_a for b in changed_b)


def canonical_order(body: list, key) -> list:
    """Each run of simple statements (assignments and expressions; up to :data:`RUN_LIMIT` of them) in the order of
    (depth, ``key``): a statement's depth is one more than the deepest earlier statement of the run it depends on,
    so every dependency is kept, and statements of one depth are sorted by ``key`` (name-free: two statements that
    tie print alike)."""
    out, run = [], []
    for node in body + [None]:
        if isinstance(node, _SIMPLE):
            run.append(node)
            continue
        if 1 < len(run) <= RUN_LIMIT:
            names = [_names(s) for s in run]
            depth = []
            for j in range(len(run)):
                depth.append(1 + max((depth[i] for i in range(j) if _depends(names[i], names[j])), default=0))
            run = [s for _, _, s in sorted(zip(depth, map(key, run), run), key=lambda t: t[:2])]
        out += run
        run = []
        if node is not None:
            out.append(node)
    return out
