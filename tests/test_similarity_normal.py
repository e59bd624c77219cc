"""The similarity report's normaliser, one class of disguise at a time (no hand-in, no report: ``make check``).

Each test writes the same code two ways a student might and checks that both normalise to the same tokens
(copydetect's form: names as ``V``); the disguised copies of whole hand-ins, on every assignment, are in
tests/test_similarity.py.
"""

from __future__ import annotations

import pytest

from attention_course.grading.similarity.normal import normalise, normalise_all
from attention_course.grading.similarity.read import filtered


def same(*versions: str, api=frozenset()) -> None:
    tokens = [filtered(normalise_all([v], api))[0] for v in versions]
    assert all(t == tokens[0] for t in tokens), "\n---\n".join(normalise_all([v], api) for v in versions)


def test_operators_and_their_function_forms():
    same("def f(a, b):\n    return a @ b + a * b - a / b",
         "def f(a, b):\n    return np.subtract(np.add(np.matmul(a, b), np.multiply(a, b)), np.divide(a, b))",
         "def f(a, b):\n    return torch.matmul(a, b).add(torch.mul(a, b)).sub(a.div(b))",
         "def f(a, b):\n    return a.dot(b) + torch.mul(a, b) - torch.true_divide(a, b)")


@pytest.mark.parametrize("spec, other", [
    ("'ij,jk->ik', A, B", "A @ B"), ("'...ij,...kj->...ik', A, B", "A @ B.T"),
    ("'bhqd,bhkd->bhqk', A, B", "A @ B.transpose(-2, -1)"), ("'ji,jk->ik', A, B", "A.T @ B"),
    ("'bij,bjk->bik', A, B", "torch.bmm(A, B)")])
def test_an_einsum_that_is_a_matrix_product(spec, other):
    same(f"def f(A, B):\n    return torch.einsum({spec})", f"def f(A, B):\n    return {other}")


def test_square_roots_scales_transposes_and_axes():
    same("def f(S, K, d):\n    return (S / math.sqrt(d)).sum(axis=-1, keepdims=True) + K.T",
         "def f(S, K, d):\n    return np.sum(S * (1 / np.sqrt(d)), -1, keepdims=True) + np.transpose(K)",
         "def f(S, K, d):\n    return torch.sum(S * d ** -0.5, dim=-1, keepdim=True) + K.transpose(-2, -1)",
         "def f(S, K, d):\n    return (S / d ** 0.5).sum(keepdims=True, axis=-1) + K.mT")


def test_loops_that_append_and_comprehensions():
    same("def f(xs, n):\n    out = [x * 2 for x in xs if x > n]\n    return out",
         "def f(xs, n):\n    out = []\n    for x in xs:\n        if x > n:\n            out.append(x * 2)\n    return out",
         "def f(xs, n):\n    return [x * 2 for x in xs if x > n]")


def test_counting_while_loops_and_lambdas():
    same("def f(xs, n):\n    out = []\n    for i in range(n):\n        out.append(xs[i] * 2)\n    return out",
         "def f(xs, n):\n    out = []\n    i = 0\n    while i < n:\n        out.append(xs[i] * 2)\n        i += 1\n    return out",
         "def f(xs, n):\n    double = lambda v: v * 2\n    return [double(xs[i]) for i in range(n)]")


def test_temporaries_and_helpers_inlined_or_split():
    api = frozenset({"attention"})
    same("def attention(Q, K, V):\n    return softmax(Q @ K.T) @ V\n\ndef softmax(S):\n    return S.exp() / S.exp().sum()",
         "def attention(Q, K, V):\n    S = Q @ K.T\n    A = S.exp() / S.exp().sum()\n    out = A @ V\n    return out",
         api=api)
    same("def attention(Q, K, V):\n    S = Q @ K.T\n    e = S.exp()\n    return e / e.sum() @ V",
         "def _scores(Q, K):\n    return Q @ K.T\n\ndef attention(Q, K, V):\n    weights = _weights(_scores(Q, K))\n"
         "    return weights @ V\n\ndef _weights(S):\n    e = S.exp()\n    return e / e.sum()", api=api)


def test_dead_code_and_harmless_statements():
    same("def f(x):\n    y = x + 1\n    return y * 2",
         "def f(x):\n    _ = None\n    y = x + 1\n    assert True\n    unused_3 = len([])\n    pass\n"
         "    if False:\n        print('debug')\n    x.shape\n    print(y)\n    z = 0\n    return y * 2")


def test_independent_statements_in_any_order_tuples_and_augmented_assignments():
    same("def f(X, W, b, n):\n    q = X @ W\n    k = X @ b\n    s = 0\n    s = s + q.sum()\n    s = s + k.sum()\n"
         "    out = []\n    out.append(q)\n    return q @ k.T * n, s, out",
         "def f(X, W, b, n):\n    s = 0\n    k, q = X @ b, X @ W\n    s += q.sum()\n    s += k.sum()\n"
         "    out = []\n    out.append(q)\n    return q @ k.T * n, s, out")
    # what depends on what stays in its order: swapping the two sums is not the same code once s is read between
    a = "def f(x):\n    s = x + 1\n    t = s * 2\n    s = x - 1\n    return s, t"
    b = "def f(x):\n    s = x - 1\n    t = s * 2\n    s = x + 1\n    return s, t"
    assert filtered(normalise(a))[0] != filtered(normalise(b))[0]
    # elements of one array set in any order; an attribute of self set before or after another
    same("def f():\n    K = np.zeros((3, 3))\n    K[0, 1] = 5.0\n    K[2, 2] = 1.0\n    return K",
         "def f():\n    K = np.zeros((3, 3))\n    K[2, 2] = 1.0\n    K[0, 1] = 5.0\n    return K")
    same("class M:\n    def __init__(self, d):\n        self.a = g(d)\n        self.b = h(d)",
         "class M:\n    def __init__(self, d):\n        self.b, self.a = h(d), g(d)")


def test_operands_of_commutative_operators_and_comparisons_in_any_order():
    same("def f(X, W, b, n, i):\n    return (X @ W + b * 2 - n, i < n, i == 0, i >= 1)",
         "def f(X, W, b, n, i):\n    return (-n + (2 * b + X @ W), n > i, 0 == i, 1 <= i)")
    for a, b in (("a - b * 2", "a * 2 - b"), ("a < b + 1", "a + 1 < b"), ("a @ b + c", "a @ (b + c)")):
        assert filtered(normalise(f"def f(a, b, c):\n    return {a}"))[0] != \
            filtered(normalise(f"def f(a, b, c):\n    return {b}"))[0], (a, b)


def test_a_try_whose_handlers_raise_again_is_its_body():
    same("def f(x):\n    y = g(x)\n    return y + 1",
         "def f(x):\n    try:\n        y = g(x)\n        return y + 1\n    except Exception:\n        raise")
    assert "except" in normalise("def f(x):\n    try:\n        return g(x)\n    except ValueError:\n        return 0")


def test_units_conditionals_and_wrapping_functions():
    same("def f(X, W, d, causal):\n    S = X @ W / d\n    S = S.tril() if causal else S\n    return S * 2.0",
         "def f(X, W, d, causal):\n    S = (X @ W / d + 0) * 1\n    if causal:\n        S = S.tril()\n    return S * 2",
         "def f(X, W, d, causal):\n    def inner(a, b, c, flag):\n        S = 1 * (a @ b) / c\n"
         "        if not flag:\n            pass\n        else:\n            S = S.tril()\n        return 2 * S\n"
         "    return inner(X, W, d, causal)")
    assert filtered(normalise("def f(x):\n    return x * 2"))[0] != filtered(normalise("def f(x):\n    return x * 1"))[0]


def test_a_class_used_as_a_box_of_functions():
    plain = "def attention(Q, K):\n    return softmax(Q @ K.T)\n\ndef softmax(S):\n    return S.exp() / S.exp().sum()"
    same(plain,
         "class Impl:\n    @staticmethod\n    def attention(Q, K):\n        return Impl.softmax(Q @ K.T)\n\n"
         "    @staticmethod\n    def softmax(S):\n        return S.exp() / S.exp().sum()\n\n"
         "attention = Impl.attention\nsoftmax = Impl.softmax",
         "class Impl:\n    def attention(me, Q, K):\n        return softmax(Q @ K.T)\n\n"
         "    def softmax(me, S):\n        return S.exp() / S.exp().sum()\n\n"
         "impl = Impl()\nattention = impl.attention\nsoftmax = impl.softmax",
         "class Impl:\n    def attention(self, Q, K):\n        return self.softmax(Q @ K.T)\n\n"
         "    def softmax(self, S):\n        return S.exp() / S.exp().sum()\n\n"
         "attention = Impl().attention\nsoftmax = Impl().softmax", api=frozenset({"attention", "softmax"}))
    # a class whose methods read their instance is not a box
    stateful = "class Impl:\n    def attention(self, Q, K):\n        return self.scale * (Q @ K.T)"
    assert "class" in normalise(stateful)


def test_a_list_made_before_other_statements_then_filled_by_a_loop():
    same("def f(xs, n):\n    out = []\n    m = n + 1\n    for x in xs:\n        out.append(x * m)\n    return out",
         "def f(xs, n):\n    m = n + 1\n    return [x * m for x in xs]",
         "def f(xs, n):\n    m = n + 1\n    out = []\n    for x in xs:\n        out.append(x * m)\n"
         "        unused = len([])\n    return out")  # an append loop once what does nothing is gone


def test_an_underscore_is_a_name_like_any_other():
    same("def f(T):\n    H, _, D = T.shape\n    return H * D", "def f(T):\n    H, unused, D = T.shape\n    return H * D")


def test_cell_magics_line_magics_and_exec_strings():
    plain = "def f(a, b):\n    return a @ b"
    same(plain, f"%%writefile impl.py\n{plain}\n", f"%%capture\n{plain}\n", f"exec({plain!r})",
         f"%time exec({plain!r})")
    # magics and shell escapes that hold no code are commands, not code of one's own
    same(plain, f"%matplotlib inline\n{plain}", f"!pip install numpy\n{plain}\n%run -i impl.py",
         f"files = !ls\n{plain}")
    # a constant string given to exec through compile, to IPython's run_cell, or to eval anywhere is read too
    same(plain, f"exec(compile({plain!r}, '<answer>', 'exec'))", f"get_ipython().run_cell({plain!r})")
    same(plain, "def f(a, b):\n    return eval('a @ b')", "def f(a, b):\n    out = eval('a @ b')\n    return out")


def test_imports_are_not_code_of_ones_own():
    same("def f(a):\n    return a.sum()", "import numpy as np\nfrom impl import *\n\ndef f(a):\n    return np.sum(a)")


def test_the_api_is_never_dropped_and_broken_code_is_kept():
    assert "def helper" in normalise_all(["def helper(x):\n    return x + 1"], frozenset({"helper"}))
    assert normalise("def f(:\n  pass") == "def f(:\n  pass"
    assert filtered("def f(:\n  (") is None


def test_different_code_stays_different():
    a = filtered(normalise("def f(a, b):\n    return a @ b"))[0]
    for other in ("def f(a, b):\n    return a * b", "def f(a, b):\n    return b @ a.T",
                  "def f(a, b):\n    return torch.einsum('ij,ik->jk', a, b)"):
        assert filtered(normalise(other))[0] != a, other


def test_a_port_between_numpy_and_pytorch():
    """Issue 61: the spellings a port changes, and the conversions it adds at a function's edges."""
    same("def f(S, mask, d):\n    S = S / np.sqrt(d)\n    S[mask] = -np.inf\n"
         "    z = np.exp(S - np.max(S, axis=-1, keepdims=True))\n    return z / z.sum(axis=-1, keepdims=True)",
         "def f(S, mask, d):\n    S = torch.as_tensor(S)\n    S = S * d ** -0.5\n    S = S.masked_fill(mask, -np.inf)\n"
         "    z = torch.exp(S - torch.amax(S, dim=-1, keepdim=True))\n    return (z / z.sum(dim=-1, keepdim=True)).numpy()",
         "def f(S, mask, d):\n    S = np.asarray(S, dtype=float)\n    S = S / math.sqrt(d)\n    S = np.where(mask, -np.inf, S)\n"
         "    z = np.exp(S - S.max(-1, keepdims=True))\n    return z / np.sum(z, -1, keepdims=True)")


def test_independent_updates_in_a_loop_body_in_any_order():
    same("def f(xs):\n    m, s = 0, 0\n    for x in xs:\n        a = x.max()\n        b = x.sum()\n        m = m + a\n"
         "        s = s + b\n    return m, s",
         "def f(xs):\n    s = 0\n    m = 0\n    for x in xs:\n        b = x.sum()\n        s += b\n        a = x.max()\n"
         "        m += a\n    return m, s")


def test_a_reciprocal_power_is_a_negative_power():
    same("def f(x, base):\n    return base ** (-2.0 * x / 8)", "def f(x, base):\n    return 1 / base ** (2 * x / 8)",
         "def f(x, base):\n    return 1.0 / (base ** (2.0 * x / 8))", "def f(x, base):\n    return 1 / base ** (x * 2 / 8)")
    same("def f(d):\n    return d ** -0.5", "def f(d):\n    return 1 / d ** 0.5", "def f(d):\n    return 1 / math.sqrt(d)")
    assert filtered(normalise("def f(x, b):\n    return b ** -x"))[0] != filtered(normalise("def f(x, b):\n    return b ** x"))[0]
