"""Synthetic submissions for 01_self_attention: realistic mistakes and alternative correct answers.

Each mistake names the grade cells it must lose points in (``loses``); it must keep full points in
every other grade cell. Alternatives must earn every autograded point.
"""

from tools.submissions import Submission

PROJECT = ("test_project_qkv_shapes", "test_project_qkv_values")
SA = ("test_self_attention_weights", "test_self_attention_output")

#: The complete answers in the two other numeric styles every catalogue carries (issue 25): the submission
#: written in float32 PyTorch and the one in float64 NumPy ("reference": the master's own solution), each
#: earning every point. Where a style cannot apply: the SelfAttention module is PyTorch in every style (nn.Linear layers).
PRECISIONS = {"float32 PyTorch": "alt-torch-float32", "float64 NumPy": "alt-numpy-float64"}

SUBMISSIONS = [
    # ---- Part 1: projections ---------------------------------------------------------------
    Submission(
        "v-uses-wq", "kept the starter code's typo: the values are projected with W_q and b_q",
        edits=[("project_qkv", "V = X @ W_v + b_v", "V = X @ W_q + b_q")],
        says='Which weights did you use for the values?',
        headline="V is computed with W_q",
        loses=frozenset({*PROJECT, "test_self_attention_output"}), in_demo=True,
    ),
    Submission(
        "no-bias", "forgot the biases of the projections",
        edits=[("project_qkv", "Q = X @ W_q + b_q\n    K = X @ W_k + b_k\n    V = X @ W_v + b_v",
                "Q = X @ W_q\n    K = X @ W_k\n    V = X @ W_v")],
        says='common mistake: the bias is missing',
        loses=frozenset({"test_project_qkv_values", *SA}),
    ),
    # ---- Part 2: scores --------------------------------------------------------------------
    Submission(
        "unscaled-scores", "did not divide the scores by sqrt(d_k)",
        edits=[("scaled_scores", "return Q @ K.T / math.sqrt(d_k)", "return Q @ K.T")],
        says='common mistake: the scores are not scaled at all',
        headline="the scores are not scaled at all",
        loses=frozenset({"test_scores_values", *SA}), in_demo=True,
    ),
    Submission(
        "scale-by-tokens", "scaled by the square root of the number of tokens instead of d_k",
        edits=[("scaled_scores", "d_k = Q.shape[-1]", "d_k = Q.shape[0]")],
        says='the scale uses the number of queries instead of d_k',
        loses=frozenset({"test_scores_values", *SA}),
    ),
    Submission(
        "scores-transposed", "computed K Q^T (keys by queries) instead of Q K^T",
        edits=[("scaled_scores", "return Q @ K.T / math.sqrt(d_k)", "return K @ Q.T / math.sqrt(d_k)")],
        says='S = Q K^T, not K Q^T',
        loses=frozenset({"test_scores_shape", "test_scores_values", *SA}),
    ),
    # ---- Part 3: softmax -------------------------------------------------------------------
    Submission(
        "softmax-naive", "exponentiated the scores without subtracting the maximum (overflows)",
        edits=[("softmax", "shifted = S - S.max(axis=axis, keepdims=True)", "shifted = S")],
        says='overflowed',
        headline="overflowed",
        loses=frozenset({"test_softmax_stable"}), in_demo=True,
    ),
    Submission(
        "softmax-global-max", "subtracted the maximum of the whole array instead of each row's",
        edits=[("softmax", "shifted = S - S.max(axis=axis, keepdims=True)", "shifted = S - S.max()")],
        says='Subtract the maximum of each row',
        loses=frozenset({"test_softmax_stable"}),
    ),
    Submission(
        "softmax-fixed-axis", "normalised along the last axis whatever `axis` it was given",
        edits=[("softmax", "shifted = S - S.max(axis=axis, keepdims=True)", "shifted = S - S.max(axis=-1, keepdims=True)"),
               ("softmax", "return e / e.sum(axis=axis, keepdims=True)", "return e / e.sum(axis=-1, keepdims=True)")],
        says="the `axis` argument is ignored",
        headline="the `axis` argument is ignored",
        loses=frozenset({"test_softmax_values", "test_softmax_stable", "test_matrix_form_reference",
                         "test_matrix_form_general"}),
    ),
    Submission(
        "softmax-in-place", "shifted the scores in place, modifying the caller's array",
        edits=[("softmax", "shifted = S - S.max(axis=axis, keepdims=True)",
                "S -= S.max(axis=axis, keepdims=True)\n    shifted = S")],
        noted='your function softmax changed its argument S in place',  # in place: noted at autograde, no point lost (README, Not defended)
        headline='S was modified in place',
    ),
    # ---- Part 4: self-attention ------------------------------------------------------------
    Submission(
        "softmax-over-queries", "normalised the scores over the queries (axis 0) instead of the keys",
        edits=[("self_attention", "softmax(scaled_scores(Q, K), axis=-1)", "softmax(scaled_scores(Q, K), axis=0)")],
        says='is the softmax taken over the wrong axis?',
        loses=frozenset(SA), in_demo=True,
    ),
    Submission(
        "weights-transposed", "weighted the values with the transposed attention matrix",
        edits=[("self_attention", "return weights @ V, weights", "return weights.T @ V, weights")],
        says='common mistake: the values are weighted by the transposed weights',
        headline="the values are weighted by the transposed weights",
        loses=frozenset({"test_self_attention_output"}),
    ),
    # ---- Parts 6-7: column convention ------------------------------------------------------
    Submission(
        "loop-weights-by-row", "stored each query's weights as a row of A instead of a column",
        edits=[("attention_by_token", "A[:, n] = a_n", "A[n, :] = a_n")],
        says='each column (one query) sums to 1',
        headline="each column (one query) sums to 1",
        loses=frozenset({"test_by_token_reference", "test_by_token_general"}),
    ),
    Submission(
        "columns-softmax-wrong-axis", "in the column convention, normalised along the rows (axis 1)",
        edits=[("self_attention_columns", "A = softmax(scores, axis=0)", "A = softmax(scores, axis=1)")],
        says='each column (one query) sums to 1',
        loses=frozenset({"test_matrix_form_reference", "test_matrix_form_general"}),
    ),
    Submission(
        "columns-scale-by-tokens", "confused D and N: scaled by sqrt(N) instead of sqrt(D)",
        edits=[("self_attention_columns", "math.sqrt(Q.shape[0])", "math.sqrt(Q.shape[1])")],
        says='the scale uses the number of tokens N instead of D',
        headline="divides the scores by sqrt(D)",
        loses=frozenset({"test_matrix_form_reference", "test_matrix_form_general"}), in_demo=True,
    ),
    # ---- Part 8: permutation equivariance --------------------------------------------------
    Submission(
        "equivariance-exact-equality", "compared the two sides exactly (np.array_equal): rounding makes attention fail",
        edits=[("is_permutation_equivariant", "return bool(np.allclose(f(X[:, perm]), f(X)[:, perm]))",
                "return bool(np.array_equal(f(X[:, perm]), f(X)[:, perm]))")],
        says="is your comparison exact",
        headline="is your comparison exact (==, np.array_equal) instead of np.allclose?",
        loses=frozenset({"test_permutation_equivariance"}),
    ),
    Submission(
        "equivariance-output-not-permuted", "compared f(X[:, perm]) with f(X), forgetting to permute the output",
        edits=[("is_permutation_equivariant", "np.allclose(f(X[:, perm]), f(X)[:, perm])", "np.allclose(f(X[:, perm]), f(X))")],
        says='Compare f applied to the permuted tokens',
        headline="Compare f applied to the permuted tokens",
        loses=frozenset({"test_permutation_equivariance"}),
    ),
    Submission(
        "equivariance-sorted-values", "compared the two sides' values sorted row by row: any reshuffle of the tokens "
        "passes",
        edits=[("is_permutation_equivariant", "np.allclose(f(X[:, perm]), f(X)[:, perm])",
                "np.allclose(np.sort(f(X[:, perm]), axis=1), np.sort(f(X)[:, perm], axis=1))")],
        says="reversing the token order is not permutation equivariant",
        headline="not sorted values, sums or sets",
        loses=frozenset({"test_permutation_equivariance"}),
    ),
    # ---- Parts 9-10: PyTorch ---------------------------------------------------------------
    Submission(
        "softmax-over-batch", "took the softmax over the batch axis (dim=0)",
        edits=[("dot_product_attention", "weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=0)")],
        says='is the softmax taken over the wrong axis?',
        headline="is the softmax taken over the wrong axis?",
        loses=frozenset({"test_dot_product_shapes", "test_dot_product_values"}),
    ),
    Submission(
        "dot-product-softmax-no-max", "wrote the softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("dot_product_attention", "weights = torch.softmax(scores, dim=-1)",
                "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_dot_product_values"}),
    ),
    Submission(
        "module-softmax-no-max", "wrote the module's softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("self_attention_module", "weights = torch.softmax(scores, dim=-1)",
                "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_module_weights", "test_module_output"}),
    ),
    Submission(
        "module-with-bias", "gave the module's projections biases (nn.Linear's default)",
        edits=[("self_attention_module", "self.W_q = nn.Linear(embed_dim, embed_dim, bias=False)\n"
                "        self.W_k = nn.Linear(embed_dim, embed_dim, bias=False)\n"
                "        self.W_v = nn.Linear(embed_dim, embed_dim, bias=False)",
                "self.W_q = nn.Linear(embed_dim, embed_dim)\n"
                "        self.W_k = nn.Linear(embed_dim, embed_dim)\n"
                "        self.W_v = nn.Linear(embed_dim, embed_dim)")],
        says='has a bias',
        loses=frozenset({"test_module_structure", "test_module_weights", "test_module_output"}),
    ),
    Submission(
        "module-unscaled", "forgot the 1/sqrt(D) scale in the module",
        edits=[("self_attention_module", "scores = Q @ K.transpose(-2, -1) / math.sqrt(self.embed_dim)",
                "scores = Q @ K.transpose(-2, -1)")],
        says='common mistake: the scores are not scaled by 1/sqrt(D)',
        loses=frozenset({"test_module_weights", "test_module_output"}),
    ),
    Submission(
        "module-wq-for-v", "used the query projection for the values in the module",
        edits=[("self_attention_module", "Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)",
                "Q, K, V = self.W_q(x), self.W_k(x), self.W_q(x)")],
        says='common mistake: the values are not computed with W_v',
        headline="the values are not computed with W_v",
        loses=frozenset({"test_module_structure", "test_module_output"}),
    ),
    # ---- Issue 60: arguments ignored, notebook globals read, axes of length 1, rows far below 0, A^T V,
    # gradients ----------------------------------------------------------------------------------
    Submission(
        "scores-scale-global-D", "scaled the scores by sqrt(D), the notebook's global width of the example, not d_k of Q",
        edits=[("scaled_scores", "d_k = Q.shape[-1]", "d_k = D  # the width of the tokens")],
        says="reads the notebook's variable D instead",  # at autograde the notebook's variables are out of reach
        headline="the width D of the notebook's examples",
        loses=frozenset({"test_scores_shape", "test_scores_values", *SA}),
    ),
    Submission(
        "sa-inline-scale-global-D", "wrote self_attention's scores inline, scaled by the notebook's global D",
        edits=[("self_attention", "weights = softmax(scaled_scores(Q, K), axis=-1)",
                "weights = softmax(Q @ K.T / np.sqrt(D), axis=-1)")],
        says="reads the notebook's variable D instead",
        headline="the width D of the notebook's example",
        loses=frozenset(SA),
    ),
    Submission(
        "softmax-shift-only-positive", "subtracted the row maximum only when it is positive (to stop overflow), so rows "
        "of very negative scores underflow to 0 / 0",
        edits=[("softmax", "shifted = S - S.max(axis=axis, keepdims=True)",
                "shifted = S - np.maximum(S.max(axis=axis, keepdims=True), 0.0)  # only large scores overflow")],
        says="also when that maximum is negative",
        headline="also when that maximum is negative",
        loses=frozenset({"test_softmax_stable"}),
    ),
    Submission(
        "by-token-global-sizes", "took the loop's sizes from the notebook's globals N_udl, D_udl instead of from X",
        edits=[("attention_by_token", "D, N = X.shape", "D, N = D_udl, N_udl")],
        says="reads the notebook's variable D_udl instead",
        headline="(3, 3) is the size of the book's example",
        loses=frozenset({"test_by_token_reference", "test_by_token_general"}),
    ),
    Submission(
        "columns-scale-global-D", "scaled the column-convention scores by sqrt(D_udl), the notebook's global",
        edits=[("self_attention_columns", "math.sqrt(Q.shape[0])", "math.sqrt(D_udl)")],
        says="reads the notebook's variable D_udl instead",
        headline="the D of the book's example (D_udl)",
        loses=frozenset({"test_matrix_form_reference", "test_matrix_form_general"}),
    ),
    Submission(
        "columns-always-scaled", "ignored `scale`: always divided the scores by sqrt(D_q)",
        edits=[("self_attention_columns", "    if scale:\n        scores = scores / math.sqrt(Q.shape[0])",
                "    scores = scores / math.sqrt(Q.shape[0])  # scaled dot-product attention")],
        says="the scores are scaled although scale=False",
        headline="the scores are scaled although scale=False",
        loses=frozenset({"test_matrix_form_reference", "test_matrix_form_general"}),
    ),
    Submission(
        "columns-never-scaled", "ignored `scale`: never divided the scores",
        edits=[("self_attention_columns", "    if scale:\n        scores = scores / math.sqrt(Q.shape[0])\n", "")],
        says="the scores are not scaled although scale=True",
        headline="the scores are not scaled although scale=True",
        loses=frozenset({"test_matrix_form_reference", "test_matrix_form_general"}),
    ),
    Submission(
        "dot-squeeze-all", "dropped the query axis with .squeeze() (no argument), which drops a batch or key axis of 1 too",
        edits=[("dot_product_attention", "return output.squeeze(1), weights.squeeze(1)", "return output.squeeze(), weights.squeeze()")],
        says="An axis of length 1 disappeared",
        headline="An axis of length 1 disappeared",
        loses=frozenset({"test_dot_product_shapes"}),
    ),
    Submission(
        "module-weights-transposed", "weighted the module's values with the transposed attention matrix (A^T V)",
        edits=[("self_attention_module", "return weights @ V, weights", "return weights.transpose(-2, -1) @ V, weights")],
        says="the values are weighted by the transposed weights (A^T V)",
        headline="the values are weighted by the transposed weights (A^T V)",
        loses=frozenset({"test_module_output"}),
    ),
    Submission(
        "module-weights-from-numpy", "reused the NumPy softmax of Part 3 in the module: right outputs, but no gradient "
        "flows through the weights",
        edits=[("self_attention_module", "weights = torch.softmax(scores, dim=-1)",
                "weights = torch.from_numpy(softmax(scores.detach().numpy(), axis=-1)).to(scores.dtype)  # Part 3's softmax")],
        says="no gradient flows through the attention weights",
        headline="no gradient flows through the attention weights",
        loses=frozenset({"test_module_output"}),
    ),
    # ---- Alternative correct answers -------------------------------------------------------
    Submission(
        "alt-einsum", "every computation written with einsum",
        replace={
            "project_qkv": '''
def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    Q = np.einsum("ld,dk->lk", X, W_q) + b_q
    K = np.einsum("ld,dk->lk", X, W_k) + b_k
    V = np.einsum("ld,dv->lv", X, W_v) + b_v
    return Q, K, V
''',
            "scaled_scores": '''
def scaled_scores(Q, K):
    return np.einsum("ik,jk->ij", Q, K) / np.sqrt(Q.shape[1])
''',
            "self_attention": '''
def self_attention(X, W_q, b_q, W_k, b_k, W_v, b_v):
    Q, K, V = project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v)
    A = softmax(scaled_scores(Q, K))
    return np.einsum("ij,jv->iv", A, V), A
''',
            "self_attention_columns": '''
def self_attention_columns(X, omega_q, beta_q, omega_k, beta_k, omega_v, beta_v, scale=False):
    Q = np.einsum("ed,dn->en", omega_q, X) + beta_q
    K = np.einsum("ed,dn->en", omega_k, X) + beta_k
    V = np.einsum("ed,dn->en", omega_v, X) + beta_v
    S = np.einsum("dm,dn->mn", K, Q)
    if scale:
        S = S / np.sqrt(Q.shape[0])
    A = softmax(S, axis=0)
    return np.einsum("dm,mn->dn", V, A), A
''',
            "dot_product_attention": '''
def dot_product_attention(query, keys, values):
    weights = torch.softmax(torch.einsum("bh,bsh->bs", query, keys), dim=-1)
    return torch.einsum("bs,bsh->bh", weights, values), weights
''',
            "self_attention_module": '''
class SelfAttention(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.embed_dim = embed_dim
        self.W_q = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_k = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_v = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        a = torch.einsum("bid,bjd->bij", q, k).div(self.embed_dim ** 0.5).softmax(dim=-1)
        return torch.einsum("bij,bjd->bid", a, v), a
''',
        },
        in_demo=True,
    ),
    Submission(
        "alt-torch-float32", "the NumPy parts written in float32 PyTorch, returning tensors",
        replace={
            "project_qkv": '''
def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    X = t(X)
    return X @ t(W_q) + t(b_q), X @ t(W_k) + t(b_k), X @ t(W_v) + t(b_v)
''',
            "scaled_scores": '''
def scaled_scores(Q, K):
    Q, K = torch.as_tensor(Q, dtype=torch.float32), torch.as_tensor(K, dtype=torch.float32)
    return Q @ K.T / Q.shape[-1] ** 0.5
''',
            "softmax": '''
def softmax(S, axis=-1):
    return torch.softmax(torch.as_tensor(S, dtype=torch.float32), dim=axis)
''',
            "attention_by_token": '''
def attention_by_token(X, omega_q, beta_q, omega_k, beta_k, omega_v, beta_v):
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    X, oq, ok, ov, bq, bk, bv = map(t, (X, omega_q, omega_k, omega_v, beta_q, beta_k, beta_v))
    N = X.shape[1]
    out, A = torch.zeros(ov.shape[0], N), torch.zeros(N, N)
    for n in range(N):
        q = oq @ X[:, n] + bq[:, 0]
        keys = torch.stack([ok @ X[:, m] + bk[:, 0] for m in range(N)])
        vals = torch.stack([ov @ X[:, m] + bv[:, 0] for m in range(N)])
        a = torch.softmax(keys @ q, dim=0)
        A[:, n] = a
        out[:, n] = a @ vals
    return out, A
''',
            "self_attention_columns": '''
def self_attention_columns(X, omega_q, beta_q, omega_k, beta_k, omega_v, beta_v, scale=False):
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    X = t(X)
    Q, K, V = t(omega_q) @ X + t(beta_q), t(omega_k) @ X + t(beta_k), t(omega_v) @ X + t(beta_v)
    S = K.T @ Q
    if scale:
        S = S / Q.shape[0] ** 0.5
    A = torch.softmax(S, dim=0)
    return V @ A, A
''',
            "is_permutation_equivariant": '''
def is_permutation_equivariant(f, X, perm):
    out = torch.as_tensor(f(X))
    out_perm = torch.as_tensor(f(X[:, list(perm)]))
    return bool(torch.allclose(out_perm, out[:, list(perm)], atol=1e-6))
''',
        },
    ),
    Submission(
        "alt-loops", "explicit Python loops instead of matrix products",
        replace={
            "project_qkv": '''
def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    def affine(W, b):
        out = np.zeros((X.shape[0], W.shape[1]))
        for i in range(X.shape[0]):
            for j in range(W.shape[1]):
                out[i, j] = sum(X[i, d] * W[d, j] for d in range(X.shape[1])) + b[j]
        return out
    return affine(W_q, b_q), affine(W_k, b_k), affine(W_v, b_v)
''',
            "scaled_scores": '''
def scaled_scores(Q, K):
    S = np.zeros((Q.shape[0], K.shape[0]))
    for i in range(Q.shape[0]):
        for j in range(K.shape[0]):
            S[i, j] = np.dot(Q[i], K[j]) / np.sqrt(Q.shape[1])
    return S
''',
            "softmax": '''
def softmax(S, axis=-1):
    moved = np.moveaxis(np.array(S, dtype=float), axis, -1)
    out = np.empty_like(moved)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx]
        e = np.exp(row - max(row))
        out[idx] = e / e.sum()
    return np.moveaxis(out, -1, axis)
''',
            "self_attention": '''
def self_attention(X, W_q, b_q, W_k, b_k, W_v, b_v):
    Q, K, V = project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v)
    A = softmax(scaled_scores(Q, K))
    out = np.zeros((X.shape[0], V.shape[1]))
    for i in range(X.shape[0]):
        for j in range(X.shape[0]):
            out[i] += A[i, j] * V[j]
    return out, A
''',
            "dot_product_attention": '''
def dot_product_attention(query, keys, values):
    outs, ws = [], []
    for b in range(query.shape[0]):
        w = torch.softmax(keys[b] @ query[b], dim=0)
        ws.append(w)
        outs.append(w @ values[b])
    return torch.stack(outs), torch.stack(ws)
''',
        },
    ),
    Submission(
        "alt-torch-warning", "a correct answer whose code makes PyTorch print a UserWarning in graded cells",
        edits=[("dot_product_attention", "scores = torch.bmm(",
                "query = torch.tensor(query)  # warns: copy-constructing from a tensor\n    scores = torch.bmm(")],
    ),
    Submission(
        "alt-numpy-float64", "the PyTorch part (one query per example) in float64 NumPy, float64 tensors returned",
        replace={
            "dot_product_attention": '''
def dot_product_attention(query, keys, values):
    q, k, v = (np.asarray(t.detach(), dtype=np.float64) for t in (query, keys, values))
    scores = np.einsum("bd,bsd->bs", q, k)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return torch.from_numpy(np.einsum("bs,bsd->bd", weights, v)), torch.from_numpy(weights)
''',
        },
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (generators, einsum, elementwise "
        "sums): an independent author, whom the similarity report must not flag against the master",
        replace={
            "project_qkv": '''
def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    queries, keys, values = (X @ W + b for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))
    return queries, keys, values
''',
            "scaled_scores": '''
def scaled_scores(Q, K):
    width = K.shape[1]
    return np.einsum("id,jd->ij", Q, K) / np.sqrt(width)
''',
            "softmax": '''
def softmax(S, axis=-1):
    S = np.asarray(S, dtype=float)
    z = np.exp(S - np.amax(S, axis=axis, keepdims=True))
    return z / np.sum(z, axis=axis, keepdims=True)
''',
            "self_attention": '''
def self_attention(X, W_q, b_q, W_k, b_k, W_v, b_v):
    queries, keys, values = project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v)
    attn = softmax(scaled_scores(queries, keys), axis=1)
    return np.matmul(attn, values), attn
''',
            "heatmap_code": '''
tokens, X_toy = toy_sentence()
d_toy = X_toy.shape[1]
eye, none = np.identity(d_toy), np.zeros(d_toy)
weights = self_attention(X_toy, 3.0 * eye, none, 3.0 * eye, none, eye, none)[1]
plot_attention(weights, tokens, tokens, title="Queries and keys equal to three times the embeddings")
show()
''',
            "attention_by_token": '''
def attention_by_token(X, omega_q, beta_q, omega_k, beta_k, omega_v, beta_v):
    D, N = X.shape
    X_prime = np.zeros((omega_v.shape[0], N))
    A = np.zeros((N, N))
    for n in range(N):
        q = omega_q @ X[:, n:n + 1] + beta_q
        s = np.array([((omega_k @ X[:, m:m + 1] + beta_k).T @ q).item() for m in range(N)])
        w = np.exp(s - s.max())
        w /= w.sum()
        A[:, n] = w
        for m in range(N):
            X_prime[:, n:n + 1] += w[m] * (omega_v @ X[:, m:m + 1] + beta_v)
    return X_prime, A
''',
            "self_attention_columns": '''
def self_attention_columns(X, omega_q, beta_q, omega_k, beta_k, omega_v, beta_v, scale=False):
    Q, K, V = (omega @ X + beta for omega, beta in ((omega_q, beta_q), (omega_k, beta_k), (omega_v, beta_v)))
    scores = np.stack([K.T @ Q[:, n] for n in range(Q.shape[1])], axis=1)
    if scale:
        scores = scores / Q.shape[0] ** 0.5
    weights = np.exp(scores - scores.max(axis=0))
    weights /= weights.sum(axis=0)
    return V @ weights, weights
''',
            "is_permutation_equivariant": '''
def is_permutation_equivariant(f, X, perm):
    order = list(perm)
    permuted_first, permuted_after = f(X[:, order]), f(X)[:, order]
    return bool(np.allclose(permuted_first, permuted_after))
''',
            "dot_product_attention": '''
def dot_product_attention(query, keys, values):
    scores = (keys * query[:, None, :]).sum(dim=-1)
    weights = scores.softmax(dim=-1)
    return (weights[..., None] * values).sum(dim=1), weights
''',
            "self_attention_module": '''
class SelfAttention(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.embed_dim = embed_dim
        self.W_q, self.W_k, self.W_v = (nn.Linear(embed_dim, embed_dim, bias=False) for _ in range(3))

    def forward(self, x):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        w = torch.softmax(torch.einsum("bld,bmd->blm", q, k) / self.embed_dim ** 0.5, dim=-1)
        return torch.einsum("blm,bmd->bld", w, v), w
''',
        },
    ),
]
