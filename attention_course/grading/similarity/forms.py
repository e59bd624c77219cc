"""The similarity normaliser's expression forms (see :mod:`.normal`): operators written as functions or
methods, square roots, transposes, two-operand ``einsum`` matrix products, and call forms, each as one canonical
form; and (issue 61) what a port between NumPy and PyTorch adds or changes: conversions between arrays and
tensors (``torch.as_tensor(x)``, ``np.asarray(x)``, ``x.numpy()``...) as ``x``, and a masked store (``S[mask] =
v``, ``S.masked_fill(mask, v)``, ``np.where(mask, v, S)``) as one form; ``1 / b ** f`` as ``b ** -f``,
``d ** -0.5`` as ``1 / sqrt(d)``, a minus sign on a number factor (``-(2 * i)`` as ``-2 * i``)."""

from __future__ import annotations

import ast
import copy
import re

# ---- what the normaliser's passes share ----------------------------------------------------------------------

def name_of(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def loads(tree) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            counts[n.id] = counts.get(n.id, 0) + 1
    return counts


def stores(tree) -> dict[str, int]:
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


class Replace(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.AST], once: bool = False):
        self.values, self.once, self.done = values, once, False

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.values and not (self.once and self.done):
            self.done = True
            return copy.deepcopy(self.values[node.id])
        return node




def blocks(tree):
    for n in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(n, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block



def shape(node) -> str:
    """A piece of code with every name erased: the same however its names were chosen."""
    text = ast.dump(node, annotate_fields=False)
    for kind in ("Name", "arg", "FunctionDef", "ClassDef", "Attribute", "alias"):
        text = text.replace(f"{kind}('", f"{kind}(_'")
    return re.sub(r"_'[^']*'", "_", text)


# ---- forms ------------------------------------------------------------------------------------------------------

MODULES = {"np", "numpy", "torch", "math", "F", "jnp", "scipy", "special"}
_BINARY = {"add": ast.Add, "subtract": ast.Sub, "sub": ast.Sub, "multiply": ast.Mult, "mul": ast.Mult,
           "divide": ast.Div, "div": ast.Div, "true_divide": ast.Div, "power": ast.Pow, "pow": ast.Pow,
           "matmul": ast.MatMult, "dot": ast.MatMult, "mm": ast.MatMult, "bmm": ast.MatMult}
_METHODS = {"sum", "mean", "max", "min", "amax", "amin", "exp", "log", "argmax", "argmin", "softmax",
            "log_softmax", "reshape", "std", "var", "cumsum", "abs", "clip", "clamp", "maximum", "minimum",
            "where", "masked_fill", "tanh", "sigmoid", "relu", "logsumexp", "square", "flatten", "squeeze",
            "unsqueeze", "expand_dims", "repeat", "tile", "prod", "isnan", "isinf", "nan_to_num", "triu", "tril",
            "float", "double", "astype", "norm", "allclose", "all", "any", "zeros_like", "ones_like", "full_like",
            "empty_like", "copy", "clone", "detach", "contiguous", "view", "permute", "swapaxes", "transpose"}
_RENAMED_KEYWORDS = {"dim": "axis", "keepdim": "keepdims"}
_SQRT = {("np", "sqrt"), ("numpy", "sqrt"), ("math", "sqrt"), ("torch", "sqrt")}
#: Conversions between arrays and tensors (a port adds them at the edges of a function): ``f(x)`` is ``x``.
_CONVERSIONS = {"as_tensor", "from_numpy", "asarray", "tensor", "array", "asanyarray"}
#: Methods that convert a tensor without changing its values: ``x.numpy()`` is ``x``.
_CONVERTING_METHODS = {"numpy", "detach", "cpu"}


def _masklike(node) -> bool:
    """A subscript that selects by a condition (``S[mask]``, ``S[~keep]``, ``S[j > i]``, ``S[a | b]``)."""
    return isinstance(node, ast.Name) and "mask" in node.id.lower() or isinstance(node, (ast.Compare, ast.UnaryOp)) \
        and not isinstance(getattr(node, "op", None), ast.USub) \
        or isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitOr, ast.BitAnd))


def module_call(node) -> tuple[str, str] | None:
    """``(module, function)`` of a call such as ``np.sum(...)`` (``torch.nn.functional.softmax`` counts as ``F``)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    owner = node.func.value
    if isinstance(owner, ast.Attribute) and owner.attr == "functional":
        return "F", node.func.attr
    if isinstance(owner, ast.Name) and owner.id in MODULES:
        return owner.id, node.func.attr
    return None


def _is_transpose(node) -> ast.AST | None:
    """The operand of a swap of the last two axes (``x.transpose(-2, -1)``, ``x.mT``, ``np.transpose(x)``...)."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        args = [a.value if isinstance(a, ast.Constant) else ast.unparse(a) for a in node.args]
        if node.func.attr in ("transpose", "swapaxes") and not node.keywords and \
                sorted(map(str, args)) in (["-1", "-2"], []) and (args or node.func.attr == "transpose"):
            return node.func.value if module_call(node) is None else None
        if node.func.attr == "t" and not node.args:
            return node.func.value
    return None


def _einsum(spec: str, a, b):
    """``a @ b`` (operands transposed as needed) for a two-operand einsum that is a (batched) matrix product."""
    spec = spec.replace(" ", "")
    if "->" not in spec or spec.count(",") != 1:
        return None
    inputs, out = spec.split("->")
    left, right = inputs.split(",")
    if all(s.startswith("...") for s in (left, right, out)):
        left, right, out = left[3:], right[3:], out[3:]
    if not (len(left) == len(right) == len(out) >= 2) or left[:-2] != right[:-2] or left[:-2] != out[:-2]:
        return None
    shared = set(left[-2:]) & set(right[-2:])
    if len(shared) != 1 or len(set(left[-2:])) != 2 or len(set(right[-2:])) != 2:
        return None
    (c,) = shared
    p, q = left[-2:].replace(c, ""), right[-2:].replace(c, "")
    if c in out or out[-2:] != p + q:
        return None
    a = a if left[-2:] == p + c else ast.Attribute(a, "T", ast.Load())
    b = b if right[-2:] == c + q else ast.Attribute(b, "T", ast.Load())
    return ast.BinOp(a, ast.MatMult(), b)


def _number(node):
    """The value of a number written as a constant (not a bool), else None."""
    return node.value if isinstance(node, ast.Constant) and type(node.value) in (int, float) else None


def _negated(node):
    """``-node``, the sign put on a number factor (``-(2 * y / d)`` and ``-(y * 2 / d)`` as ``-2 * y / d``...)."""
    if _number(node) is not None:
        return ast.Constant(-node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return node.operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)) and _leading_number(node):
        if _leading_number(node.left):
            return ast.BinOp(_negated(node.left), node.op, node.right)
        return ast.BinOp(node.left, node.op, _negated(node.right))
    return ast.UnaryOp(ast.USub(), node)


def _leading_number(node) -> bool:
    """Whether a product (or quotient, by its dividend) has a number among its factors."""
    if _number(node) is not None:
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _leading_number(node.left) or _leading_number(node.right)
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _leading_number(node.left)


def _sqrt(arg):
    return ast.Call(ast.Name("sqrt", ast.Load()), [arg], [])


class Forms(ast.NodeTransformer):
    """Operators, square roots, transposes, einsum and call forms (see the module's docstring)."""

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Lambda) and not node.keywords:  # (lambda a, b: a @ b)(x, y) is x @ y
            params = [a.arg for a in node.func.args.args]
            if len(params) == len(node.args) and not (node.func.args.vararg or node.func.args.kwarg or
                                                      node.func.args.kwonlyargs or node.func.args.defaults):
                return Replace(dict(zip(params, node.args))).visit(copy.deepcopy(node.func.body))
        mod = module_call(node)
        func = node.func.attr if isinstance(node.func, ast.Attribute) else name_of(node.func)
        if mod and mod[1] in _CONVERSIONS and len(node.args) == 1 and isinstance(node.args[0], (ast.Name, ast.Attribute)):
            return node.args[0]  # torch.as_tensor(x, dtype=...) as x
        if not mod and func in _CONVERTING_METHODS and isinstance(node.func, ast.Attribute) and not node.args:
            return node.func.value  # x.numpy() as x
        if not mod and func == "masked_fill" and isinstance(node.func, ast.Attribute) and len(node.args) == 2:
            return ast.Call(ast.Attribute(node.args[0], "where", ast.Load()), [node.args[1], node.func.value], [])
        if mod and mod[1] == "einsum" and len(node.args) == 3 and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            made = _einsum(node.args[0].value, node.args[1], node.args[2])
            if made is not None:
                return made
        if mod in _SQRT and len(node.args) == 1:
            return _sqrt(node.args[0])
        if func in _BINARY and not node.keywords:
            if mod and len(node.args) == 2:
                return ast.BinOp(node.args[0], _BINARY[func](), node.args[1])
            if not mod and isinstance(node.func, ast.Attribute) and len(node.args) == 1 and func != "dot" or \
                    func == "dot" and isinstance(node.func, ast.Attribute) and len(node.args) == 1 and not mod:
                return ast.BinOp(node.func.value, _BINARY[func](), node.args[0])
        operand = _is_transpose(node)
        if operand is not None:
            return ast.Attribute(operand, "T", ast.Load())
        if mod and mod[1] in _METHODS and node.args and not isinstance(node.args[0], ast.Starred):
            node = ast.Call(ast.Attribute(node.args[0], mod[1], ast.Load()), node.args[1:], node.keywords)
            return self.visit_Call(node)
        for kw in node.keywords:
            if kw.arg in _RENAMED_KEYWORDS:
                kw.arg = _RENAMED_KEYWORDS[kw.arg]
        if isinstance(node.func, ast.Attribute) and (not node.args or len(node.args) == 1 and module_call(node)):
            axis = next((kw for kw in node.keywords if kw.arg == "axis"), None)
            if axis is not None:
                node.args = [*node.args, axis.value]
                node.keywords = [kw for kw in node.keywords if kw is not axis]
        node.keywords = sorted(node.keywords, key=lambda kw: kw.arg or "")
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        return ast.Attribute(node.value, "T", node.ctx) if node.attr == "mT" else node

    def visit_Assign(self, node):
        """``S[mask] = v`` as ``S = mask.where(v, S)`` (``np.where(mask, v, S)`` in its method form)."""
        self.generic_visit(node)
        target = node.targets[0]
        if len(node.targets) == 1 and isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                and _masklike(target.slice):
            name = target.value.id
            return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], ast.Call(
                ast.Attribute(target.slice, "where", ast.Load()), [node.value, ast.Name(name, ast.Load())], [])), node)
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.USub) and (_number(node.operand) is not None or isinstance(node.operand, ast.BinOp)
                                              and _leading_number(node.operand)):
            return _negated(node.operand)  # -2 as a number, -(2 * y) as -2 * y
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        if isinstance(node.test, ast.Constant):  # a if True else b
            return node.body if node.test.value else node.orelse
        return node

    def visit_Constant(self, node):
        if type(node.value) is float and node.value.is_integer() and abs(node.value) < 2 ** 53:
            return ast.Constant(int(node.value))  # 1.0 as 1
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        unit = {ast.Add: 0, ast.Sub: 0, ast.Mult: 1, ast.Div: 1, ast.Pow: 1}.get(type(node.op))
        if unit is not None and _number(node.right) == unit:  # x + 0, x - 0, x * 1, x / 1, x ** 1
            return node.left
        if isinstance(node.op, (ast.Add, ast.Mult)) and _number(node.left) == unit:  # 0 + x, 1 * x
            return node.right
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and node.right.value == 0.5:
            return _sqrt(node.left)
        if isinstance(node.op, ast.Pow) and _number(node.right) == -0.5:  # d ** -0.5 as 1 / sqrt(d)
            return ast.BinOp(ast.Constant(1), ast.Div(), _sqrt(node.left))
        if isinstance(node.op, ast.Div) and _number(node.left) == 1 and isinstance(node.right, ast.BinOp) \
                and isinstance(node.right.op, ast.Pow):  # 1 / b ** f as b ** -f
            return ast.BinOp(node.right.left, ast.Pow(), _negated(node.right.right))
        if isinstance(node.op, ast.Mult):
            for x, y in ((node.left, node.right), (node.right, node.left)):
                if isinstance(y, ast.BinOp) and isinstance(y.op, ast.Div) and isinstance(y.left, ast.Constant) \
                        and y.left.value == 1:  # x * (1 / y)
                    return ast.BinOp(x, ast.Div(), y.right)
                if isinstance(y, ast.BinOp) and isinstance(y.op, ast.Pow) and (_number(y.right) == -0.5 or isinstance(
                        y.right, ast.UnaryOp) and isinstance(y.right.op, ast.USub) and isinstance(y.right.operand,
                                                                                   ast.Constant)
                        and y.right.operand.value == 0.5):  # x * y ** -0.5
                    return ast.BinOp(x, ast.Div(), _sqrt(y.left))
        return node


# ---- commutative operands ---------------------------------------------------------------------------------------

_COMMUTATIVE = (ast.Add, ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)
_FLIPPED = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}


class Commutative(ast.NodeTransformer):
    """The operands of a commutative operator in a name-free order (a chain ``a + b + c`` as one list of terms, ``a -
    b`` as ``a + -b``, a term ``+ 0`` or a factor ``* 1`` dropped), the two sides of ``==`` and ``!=`` likewise,
    ``b > a`` as ``a < b``, ``a if not c else b`` as ``b if c else a``; so ``b + X @ W`` and ``X @ W + b`` are one form. (For the report only: ``+`` of lists
    does not commute, which a copy cannot use.)"""

    def _terms(self, node, op) -> list:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and op is ast.Add:
            return self._terms(node.left, op) + [ast.UnaryOp(ast.USub(), node.right)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, op):
            return self._terms(node.left, op) + self._terms(node.right, op)
        return [node]

    def visit_BinOp(self, node):
        op = next((o for o in _COMMUTATIVE if isinstance(node.op, o)), None)
        if op is None and isinstance(node.op, ast.Sub):
            op = ast.Add
        if op is None:
            return self.generic_visit(node)
        unit = 0 if op is ast.Add else 1 if op is ast.Mult else None  # x + 0 and x * 1 are x
        terms = sorted((self.visit(t) for t in self._terms(node, op)), key=shape)  # a chain's terms, each once
        terms = [t for t in terms if not (isinstance(t, ast.Constant) and type(t.value) in (int, float)
                                          and t.value == unit)] or terms[:1]
        out = terms[0]
        for term in terms[1:]:
            out = ast.BinOp(out, op(), term)
        return out

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        node.values.sort(key=shape)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        while isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):  # a if not c else b
            node = ast.IfExp(node.test.operand, node.orelse, node.body)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1:
            return node
        left, right, op = node.left, node.comparators[0], type(node.ops[0])
        if op in _FLIPPED:
            return ast.Compare(right, [_FLIPPED[op]()], [left])
        if op in (ast.Eq, ast.NotEq) and shape(right) < shape(left):
            return ast.Compare(right, [op()], [left])
        return node
