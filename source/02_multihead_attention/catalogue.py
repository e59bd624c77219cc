"""Synthetic submissions for 02_multihead_attention: realistic mistakes and alternative correct answers."""

from tools.submissions import Submission

MODULE = ("test_module_weights", "test_module_output", "test_module_mask")

#: The complete answers in the two other numeric styles every catalogue carries (issue 25): the submission
#: written in float32 PyTorch and the one in float64 NumPy ("reference": the master's own solution), each
#: earning every point. Where a style cannot apply: the MultiHeadAttention module is PyTorch in every style (nn.Linear layers).
PRECISIONS = {"float32 PyTorch": "alt-torch-float32", "float64 NumPy": "reference"}

SUBMISSIONS = [
    # ---- Part 1: independent heads ---------------------------------------------------------
    Submission(
        "head-scale-sqrt-D", "scaled each head's scores by sqrt(D), the model width, instead of sqrt(D_H)",
        edits=[("attention_head", "math.sqrt(Q.shape[-1])", "math.sqrt(X.shape[-1])")],
        says="common mistake: the scores are scaled by sqrt(D), the model width, instead of sqrt(D_H)",
        headline="sqrt(D), the model width",
        loses=frozenset({"test_attention_head", "test_multihead_independent"}), in_demo=True,
    ),
    Submission(
        "head-no-bias", "forgot the biases of each head's projections",
        edits=[("attention_head", "Q, K, V = X @ W_q + b_q, X @ W_k + b_k, X @ W_v + b_v",
                "Q, K, V = X @ W_q, X @ W_k, X @ W_v")],
        says="common mistake: the biases are missing",
        loses=frozenset({"test_attention_head", "test_multihead_independent"}),
    ),
    Submission(
        "heads-reversed", "concatenated the heads in reverse order",
        edits=[("multihead_independent", "np.concatenate(outputs, axis=-1)", "np.concatenate(outputs[::-1], axis=-1)")],
        says="common mistake: the heads are concatenated in reverse order",
        loses=frozenset({"test_multihead_independent"}), in_demo=True,
    ),
    Submission(
        "no-output-projection", "forgot the output projection W_c",
        edits=[("multihead_independent", "return np.concatenate(outputs, axis=-1) @ W_c",
                "return np.concatenate(outputs, axis=-1)")],
        says="common mistake: the output projection W_c is missing",
        loses=frozenset({"test_multihead_independent"}),
    ),
    Submission(
        "head-softmax-no-max", "wrote each head's softmax as exp(S) / sum exp(S), without subtracting the row maximum",
        edits=[("attention_head", "E = np.exp(S - S.max(axis=-1, keepdims=True))", "E = np.exp(S)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_attention_head", "test_multihead_independent"}),
    ),
    Submission(
        "head-scale-global-D_H", "scaled each head's scores by sqrt(D_H), the notebook's global D_H = 2, instead of the "
        "width of the head it is given",
        edits=[("attention_head", "math.sqrt(Q.shape[-1])", "math.sqrt(D_H)")],
        says="reads the notebook's variable D_H",
        headline="the notebook's D_H, instead of the square root of this head's width",
        loses=frozenset({"test_attention_head", "test_multihead_independent"}),
    ),
    # ---- Part 2: reshape and transpose ----------------------------------------------------
    Submission(
        "split-reshape-only", "split the heads with a reshape to [H, L, D_H] and no transpose",
        edits=[("split_heads", "return T.reshape(L, H, D // H).transpose(1, 0, 2)", "return T.reshape(H, L, D // H)")],
        says="common mistake: reshape to [H, L, D_H] without a transpose mixes tokens and heads",
        headline="without a transpose mixes tokens and heads",
        loses=frozenset({"test_split_heads", "test_multihead_combined"}), in_demo=True,
    ),
    Submission(
        "merge-reshape-only", "merged the heads with a reshape to [L, D] and no transpose",
        edits=[("split_heads", "return T.transpose(1, 0, 2).reshape(L, H * D_H)", "return T.reshape(L, H * D_H)")],
        says="common mistake: reshape to [L, D] without transposing back first mixes tokens and heads",
        loses=frozenset({"test_merge_heads", "test_multihead_combined"}),
    ),
    Submission(
        "combined-softmax-over-queries", "normalised each head's scores over the queries",
        edits=[("multihead_combined", "E = np.exp(S - S.max(axis=-1, keepdims=True))\n    weights = E / E.sum(axis=-1, keepdims=True)",
                "E = np.exp(S - S.max(axis=-2, keepdims=True))\n    weights = E / E.sum(axis=-2, keepdims=True)")],
        says="is the softmax taken over the wrong axis?",
        loses=frozenset({"test_multihead_combined"}),
    ),
    Submission(
        "combined-scale-sqrt-D", "scaled the combined form's scores by sqrt(D)",
        edits=[("multihead_combined", "math.sqrt(Q.shape[-1])", "math.sqrt(X.shape[-1])")],
        says="common mistake: the scores are scaled by sqrt(D) instead of sqrt(D_H)",
        loses=frozenset({"test_multihead_combined"}),
    ),
    Submission(
        "stack-reversed", "stacked the heads' weights in reverse order",
        edits=[("multihead_combined", "[head[key] for head in heads]", "[head[key] for head in heads[::-1]]")],
        says="common mistake: the heads are stacked in reverse order",
        loses=frozenset({"test_stack_heads"}),
    ),
    Submission(
        "combined-softmax-no-max", "wrote the combined softmax without subtracting the row maximum",
        edits=[("multihead_combined", "E = np.exp(S - S.max(axis=-1, keepdims=True))", "E = np.exp(S)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_multihead_combined"}),
    ),
    Submission(
        "split-two-heads", "split into two heads whatever H is (every visible case of the old release had two)",
        edits=[("split_heads", "return T.reshape(L, H, D // H).transpose(1, 0, 2)", "return T.reshape(L, 2, D // 2).transpose(1, 0, 2)")],
        says="every size taken from T.shape and the H it is given",
        headline="every size taken from T.shape and the H it is given",
        loses=frozenset({"test_split_heads", "test_multihead_combined"}),
    ),
    Submission(
        "split-global-D", "split with the notebook's global D = 4 instead of T's own width",
        edits=[("split_heads", "L, D = T.shape", "L = T.shape[0]")],
        says="reads the notebook's variable D",
        headline="every size taken from T.shape and the H it is given",
        loses=frozenset({"test_split_heads", "test_multihead_combined"}),
    ),
    Submission(
        "merge-two-heads", "merged heads 0 and 1 only (two heads hard-coded)",
        edits=[("split_heads", "H, L, D_H = T.shape\n    return T.transpose(1, 0, 2).reshape(L, H * D_H)",
                "return np.concatenate([T[0], T[1]], axis=-1)")],
        says="only heads 0 and 1 are merged",
        headline="only heads 0 and 1 are merged",
        loses=frozenset({"test_merge_heads", "test_multihead_combined"}),
    ),
    Submission(
        "combined-two-heads", "split the combined projections into two heads whatever H is",
        edits=[("multihead_combined", "Q = split_heads(X @ W_q + b_q, H)", "Q = split_heads(X @ W_q + b_q, 2)"),
               ("multihead_combined", "K = split_heads(X @ W_k + b_k, H)", "K = split_heads(X @ W_k + b_k, 2)"),
               ("multihead_combined", "V = split_heads(X @ W_v + b_v, H)", "V = split_heads(X @ W_v + b_v, 2)")],
        says="for each of the H heads asked for",
        headline="for each of the H heads asked for",
        loses=frozenset({"test_multihead_combined"}),
    ),
    Submission(
        "stack-two-heads", "stacked heads 0 and 1 only (two heads hard-coded)",
        edits=[("multihead_combined", "np.concatenate([head[key] for head in heads], axis=-1)",
                "np.concatenate([heads[0][key], heads[1][key]], axis=-1)")],
        says="only heads 0 and 1 are stacked",
        headline="only heads 0 and 1 are stacked",
        loses=frozenset({"test_stack_heads"}),
    ),
    Submission(
        "stack-global-heads", "stacked the notebook's heads_seq instead of the heads passed in",
        edits=[("multihead_combined", "[head[key] for head in heads]", "[head[key] for head in heads_seq]")],
        says="reads the notebook's variable heads_seq",
        headline="the notebook's heads_seq, not the heads passed in",
        loses=frozenset({"test_stack_heads"}),
    ),
    # ---- Part 3: the book's example --------------------------------------------------------
    Submission(
        "book-attention-transposed", "kept the companion notebook's bug: V times the [queries, keys] matrix",
        edits=[("multihead_columns", "outputs.append(V @ (E / E.sum(axis=0, keepdims=True)))",
                "outputs.append(V @ (E / E.sum(axis=0, keepdims=True)).T)")],
        says="the companion notebook's wrong answer",
        headline="the companion notebook's wrong answer",
        loses=frozenset({"test_book_table", "test_multihead_columns"}), in_demo=True,
    ),
    Submission(
        "columns-softmax-no-max", "wrote the column-convention softmax without subtracting the column maximum",
        edits=[("multihead_columns", "E = np.exp(S - S.max(axis=0, keepdims=True))", "E = np.exp(S)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_multihead_columns"}),
    ),
    Submission(
        "columns-scale-global-D_Hb", "scaled the column-convention scores by sqrt(D_Hb), the book example's global head width",
        edits=[("multihead_columns", "math.sqrt(Q.shape[0])", "math.sqrt(D_Hb)")],
        says="reads the notebook's variable D_Hb",
        headline="the notebook's D_Hb",
        loses=frozenset({"test_book_table", "test_multihead_columns"}),
    ),
    # ---- Part 4: the module -----------------------------------------------------------------
    Submission(
        "module-scale-sqrt-D", "scaled the module's scores by sqrt(D) instead of sqrt(D_H)",
        edits=[("multihead_module", "math.sqrt(self.d_head)", "math.sqrt(self.d_model)")],
        says="common mistake: the scores are scaled by sqrt(D) instead of sqrt(D_H)",
        loses=frozenset(MODULE), in_demo=True,
    ),
    Submission(
        "module-view-no-transpose", "split and merged the heads with view/reshape alone",
        edits=[("multihead_module", "t.view(B, L, self.num_heads, self.d_head).transpose(1, 2)",
                "t.reshape(B, self.num_heads, L, self.d_head)"),
               ("multihead_module", "(weights @ V).transpose(1, 2).reshape(B, L, D)", "(weights @ V).reshape(B, L, D)")],
        says="common mistake: the heads are split with view/reshape alone, without the transpose",
        headline="split with view/reshape alone, without the transpose",
        loses=frozenset(MODULE),
    ),
    Submission(
        "module-no-output-projection", "returned the merged heads without W_o",
        edits=[("multihead_module", "return self.W_o(out), weights", "return out, weights")],
        says="common mistake: the output projection W_o is missing",
        loses=frozenset({"test_module_output", "test_module_mask"}),
    ),
    Submission(
        "module-no-bias", "built the module's projections without biases",
        edits=[("multihead_module", "self.W_q = nn.Linear(d_model, d_model)\n        self.W_k = nn.Linear(d_model, d_model)\n"
                "        self.W_v = nn.Linear(d_model, d_model)\n        self.W_o = nn.Linear(d_model, d_model)",
                "self.W_q = nn.Linear(d_model, d_model, bias=False)\n        self.W_k = nn.Linear(d_model, d_model, bias=False)\n"
                "        self.W_v = nn.Linear(d_model, d_model, bias=False)\n        self.W_o = nn.Linear(d_model, d_model, bias=False)")],
        says="common mistake: the biases are missing",
        loses=frozenset({"test_module_structure", *MODULE}),
    ),
    Submission(
        "module-softmax-over-queries", "took the module's softmax over the queries (dim=-2)",
        edits=[("multihead_module", "weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-2)")],
        says="is the softmax taken over the wrong axis?",
        loses=frozenset(MODULE),
    ),
    Submission(
        "module-attention-transposed", "weighted the values with the transposed attention matrix",
        edits=[("multihead_module", "out = (weights @ V)", "out = (weights.transpose(-2, -1) @ V)")],
        says='output vs nn.MultiheadAttention with the same weights',
        loses=frozenset({"test_module_output", "test_module_mask"}),
    ),
    Submission(
        "module-softmax-no-max", "wrote the module's softmax as exp / sum exp, without subtracting the row maximum",
        edits=[("multihead_module", "weights = torch.softmax(scores, dim=-1)",
                "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_module_weights", "test_module_output", "test_module_mask"}),
    ),
    Submission(
        "module-mask-renormalised-after-softmax", "zeroed the masked weights after the softmax and renormalised: exact "
        "until the masked scores lie hundreds above the allowed ones",
        edits=[("multihead_module", """        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)""", """        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * mask
            weights = weights / weights.sum(dim=-1, keepdim=True)""")],
        says="Mask the scores (to -inf) before the softmax",
        headline="Mask the scores (to -inf) before the softmax",
        loses=frozenset({"test_module_mask"}),
    ),
    Submission(
        "module-mask-as-square", "reshaped the mask to (-1, 1, L, L), which only fits a square [L, L] mask",
        edits=[("multihead_module", "scores = scores.masked_fill(~mask, float(\"-inf\"))",
                "scores = scores.masked_fill(~mask.reshape(-1, 1, L, L), float(\"-inf\"))")],
        says="The mask may have any shape that broadcasts to (B, H, L, L)",
        loses=frozenset({"test_module_mask"}),
    ),
    Submission(
        "module-mask-fill-1e9", "filled the blocked scores with -1e9 instead of -inf",
        edits=[("multihead_module", 'scores = scores.masked_fill(~mask, float("-inf"))', "scores = scores.masked_fill(~mask, -1e9)")],
        says="blocked scores are filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        headline="blocked scores are filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        loses=frozenset({"test_module_mask"}),
    ),
    Submission(
        "module-mask-fill-1e4", "filled the blocked scores with -1e4 (a float16-safe habit) instead of -inf",
        edits=[("multihead_module", 'scores = scores.masked_fill(~mask, float("-inf"))', "scores = scores.masked_fill(~mask, -1e4)")],
        says="blocked scores are filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        headline="blocked scores are filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        loses=frozenset({"test_module_mask"}),
    ),
    Submission(
        "module-split-sequence-first", "split and merged the heads with nn.MultiheadAttention's sequence-first code "
        "(x taken as (L, B, D)): right for one sequence, wrong for a batch",
        edits=[("multihead_module", "t.view(B, L, self.num_heads, self.d_head).transpose(1, 2)",
                "t.reshape(L, B * self.num_heads, self.d_head).transpose(0, 1).reshape(B, self.num_heads, L, self.d_head)"),
               ("multihead_module", "(weights @ V).transpose(1, 2).reshape(B, L, D)",
                "(weights @ V).reshape(B * self.num_heads, L, self.d_head).transpose(0, 1).reshape(B, L, D)")],
        says="sequence first",
        headline="sequence first",
        loses=frozenset(MODULE),
    ),
    Submission(
        "module-mask-where-after-exp", "took exp() of every score and dropped the blocked ones with torch.where, the "
        "maximum taken over the allowed keys: the output is right, but exp() of a blocked score far above the allowed "
        "ones is inf, and the gradient through the dropped branch is 0 * inf = NaN",
        edits=[("multihead_module", """        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)""", """        if mask is None:
            mask = torch.ones_like(scores, dtype=torch.bool)
        top = scores.masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True)
        e = torch.where(mask, torch.exp(scores - top), torch.zeros_like(scores))
        weights = e / e.sum(dim=-1, keepdim=True)""")],
        says="the gradient with respect to x contains NaN or inf",
        headline="the gradient with respect to x contains NaN or inf",
        loses=frozenset({"test_module_mask"}),
    ),
    # ---- Alternative correct answers -------------------------------------------------------
    Submission(
        "alt-einsum", "every product written with einsum",
        replace={
            "attention_head": '''
def attention_head(X, W_q, b_q, W_k, b_k, W_v, b_v):
    Q = np.einsum("ld,dk->lk", X, W_q) + b_q
    K = np.einsum("ld,dk->lk", X, W_k) + b_k
    V = np.einsum("ld,dk->lk", X, W_v) + b_v
    S = np.einsum("ik,jk->ij", Q, K) / np.sqrt(Q.shape[1])
    A = np.exp(S - S.max(axis=1, keepdims=True))
    A = A / A.sum(axis=1, keepdims=True)
    return np.einsum("ij,jk->ik", A, V), A
''',
            "multihead_combined": '''
def multihead_combined(X, W_q, b_q, W_k, b_k, W_v, b_v, W_c, H):
    L, D = X.shape
    proj = lambda W, b: (np.einsum("ld,de->le", X, W) + b).reshape(L, H, D // H)
    Q, K, V = proj(W_q, b_q), proj(W_k, b_k), proj(W_v, b_v)
    S = np.einsum("ihd,jhd->hij", Q, K) / np.sqrt(D // H)
    A = np.exp(S - S.max(axis=-1, keepdims=True))
    A = A / A.sum(axis=-1, keepdims=True)
    out = np.einsum("hij,jhd->ihd", A, V).reshape(L, D)
    return np.einsum("ld,de->le", out, W_c), A


def stack_heads(heads):
    return {key: np.concatenate([h[key] for h in heads], axis=-1) for key in heads[0]}
''',
            "multihead_columns": '''
def multihead_columns(X, heads, omega_c):
    blocks = []
    for h in heads:
        Q = np.einsum("ed,dn->en", h["omega_q"], X) + h["beta_q"]
        K = np.einsum("ed,dn->en", h["omega_k"], X) + h["beta_k"]
        V = np.einsum("ed,dn->en", h["omega_v"], X) + h["beta_v"]
        S = np.einsum("em,en->mn", K, Q) / np.sqrt(Q.shape[0])
        A = np.exp(S - S.max(axis=0))
        A = A / A.sum(axis=0)
        blocks.append(np.einsum("em,mn->en", V, A))
    return np.einsum("de,en->dn", omega_c, np.concatenate(blocks, axis=0))
''',
            "multihead_module": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q, self.W_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.W_v, self.W_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, L, D = x.shape
        q, k, v = (lin(x).reshape(B, L, self.num_heads, self.d_head) for lin in (self.W_q, self.W_k, self.W_v))
        s = torch.einsum("bihd,bjhd->bhij", q, k) / self.d_head ** 0.5
        if mask is not None:
            s = torch.where(mask, s, torch.tensor(float("-inf")))
        a = s.softmax(dim=-1)
        return self.W_o(torch.einsum("bhij,bjhd->bihd", a, v).reshape(B, L, D)), a
''',
        },
        in_demo=True,
    ),
    Submission(
        "alt-sdpa", "outputs from F.scaled_dot_product_attention (weights computed alongside), float64 tensors",
        replace={
            "attention_head": '''
def attention_head(X, W_q, b_q, W_k, b_k, W_v, b_v):
    t = torch.as_tensor
    X = t(X)
    Q, K, V = X @ t(W_q) + t(b_q), X @ t(W_k) + t(b_k), X @ t(W_v) + t(b_v)
    out = F.scaled_dot_product_attention(Q[None], K[None], V[None])[0]
    weights = torch.softmax(Q @ K.T / Q.shape[-1] ** 0.5, dim=-1)
    return out, weights
''',
            "multihead_independent": '''
def multihead_independent(X, heads, W_c):
    outs = [torch.as_tensor(attention_head(X, **h)[0]) for h in heads]
    return torch.cat(outs, dim=-1) @ torch.as_tensor(W_c)
''',
            "multihead_combined": '''
def multihead_combined(X, W_q, b_q, W_k, b_k, W_v, b_v, W_c, H):
    t = torch.as_tensor
    X = t(X)
    L, D = X.shape
    heads = lambda W, b: (X @ t(W) + t(b)).reshape(L, H, D // H).transpose(0, 1)
    Q, K, V = heads(W_q, b_q), heads(W_k, b_k), heads(W_v, b_v)
    out = F.scaled_dot_product_attention(Q, K, V)
    weights = torch.softmax(Q @ K.transpose(-2, -1) / (D // H) ** 0.5, dim=-1)
    return out.transpose(0, 1).reshape(L, D) @ t(W_c), weights


def stack_heads(heads):
    return {key: np.hstack([h[key] for h in heads]) for key in heads[0]}
''',
            "multihead_module": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, L, D = x.shape
        heads = lambda t: t.unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)
        q, k, v = heads(self.W_q(x)), heads(self.W_k(x)), heads(self.W_v(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        scores = q @ k.transpose(-2, -1) / self.d_head ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.W_o(out.transpose(1, 2).flatten(-2)), scores.softmax(dim=-1)
''',
        },
    ),
    Submission(
        "alt-loops", "a Python loop over the heads instead of batched products",
        replace={
            "multihead_combined": '''
def multihead_combined(X, W_q, b_q, W_k, b_k, W_v, b_v, W_c, H):
    D_H = X.shape[1] // H
    outs, weights = [], []
    for h in range(H):
        cols = slice(h * D_H, (h + 1) * D_H)
        Q = X @ W_q[:, cols] + b_q[cols]
        K = X @ W_k[:, cols] + b_k[cols]
        V = X @ W_v[:, cols] + b_v[cols]
        S = Q @ K.T / np.sqrt(D_H)
        A = np.exp(S - S.max(axis=1, keepdims=True))
        A /= A.sum(axis=1, keepdims=True)
        outs.append(A @ V)
        weights.append(A)
    return np.hstack(outs) @ W_c, np.stack(weights)


def stack_heads(heads):
    stacked = {}
    for key in heads[0]:
        stacked[key] = np.concatenate([h[key] for h in heads], axis=-1)
    return stacked
''',
            "multihead_module": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)
        B, L, _ = x.shape
        if mask is not None:  # any form that broadcasts to (B, H, L, L): one (B, L, L) slice per head
            mask = mask.expand(B, self.num_heads, L, L)
        outs, weights = [], []
        for h in range(self.num_heads):
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            s = Q[..., cols] @ K[..., cols].transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                s = s.masked_fill(~mask[:, h], float("-inf"))
            a = torch.softmax(s, dim=-1)
            outs.append(a @ V[..., cols])
            weights.append(a)
        return self.W_o(torch.cat(outs, dim=-1)), torch.stack(weights, dim=1)
''',
        },
    ),
    Submission(
        "alt-torch-float32", "every NumPy part written in float32 PyTorch, returning tensors (the module as it is)",
        replace={
            "attention_head": '''
def attention_head(X, W_q, b_q, W_k, b_k, W_v, b_v):
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    X = t(X)
    Q, K, V = X @ t(W_q) + t(b_q), X @ t(W_k) + t(b_k), X @ t(W_v) + t(b_v)
    weights = torch.softmax(Q @ K.T / Q.shape[-1] ** 0.5, dim=-1)
    return weights @ V, weights
''',
            "multihead_independent": '''
def multihead_independent(X, heads, W_c):
    outputs = [attention_head(X, **head)[0] for head in heads]
    return torch.cat(outputs, dim=-1) @ torch.as_tensor(W_c, dtype=torch.float32)
''',
            "split_heads": '''
def split_heads(T, H):
    T = torch.as_tensor(T, dtype=torch.float32)
    L, D = T.shape
    return T.reshape(L, H, D // H).permute(1, 0, 2)


def merge_heads(T):
    T = torch.as_tensor(T, dtype=torch.float32)
    H, L, D_H = T.shape
    return T.permute(1, 0, 2).reshape(L, H * D_H)
''',
            "multihead_combined": '''
def multihead_combined(X, W_q, b_q, W_k, b_k, W_v, b_v, W_c, H):
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    X = t(X)
    Q, K, V = (split_heads(X @ t(W) + t(b), H) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))
    weights = torch.softmax(Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5, dim=-1)
    return merge_heads(weights @ V) @ t(W_c), weights


def stack_heads(heads):
    return {key: torch.cat([torch.as_tensor(h[key], dtype=torch.float32) for h in heads], dim=-1) for key in heads[0]}
''',
            "multihead_columns": '''
def multihead_columns(X, heads, omega_c):
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    X = t(X)
    outputs = []
    for h in heads:
        Q, K, V = (t(h["omega_" + s]) @ X + t(h["beta_" + s]) for s in "qkv")
        outputs.append(V @ torch.softmax(K.T @ Q / Q.shape[0] ** 0.5, dim=0))
    return t(omega_c) @ torch.cat(outputs, dim=0)
''',
        },
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (queries scaled before the product, "
        "a log-sum-exp softmax, heads cut as slices, one stacked projection): an independent author, whom the "
        "similarity report must not flag against the master",
        replace={
            "attention_head": '''
def attention_head(X, W_q, b_q, W_k, b_k, W_v, b_v):
    queries = (X.dot(W_q) + b_q) / np.sqrt(W_q.shape[1])
    keys, values = X.dot(W_k) + b_k, X.dot(W_v) + b_v
    logits = queries.dot(keys.T)
    top = logits.max(axis=1)[:, None]
    log_norm = top + np.log(np.exp(logits - top).sum(axis=1))[:, None]
    attn = np.exp(logits - log_norm)
    return attn.dot(values), attn
''',
            "multihead_independent": '''
def multihead_independent(X, heads, W_c):
    per_head = []
    for params in heads:
        out, _ = attention_head(X, params["W_q"], params["b_q"], params["W_k"], params["b_k"],
                                params["W_v"], params["b_v"])
        per_head.append(out)
    return np.hstack(per_head).dot(W_c)
''',
            "split_heads": '''
def split_heads(T, H):
    width = T.shape[1] // H
    return np.stack([T[:, i * width:(i + 1) * width] for i in range(H)])


def merge_heads(T):
    return np.concatenate(list(T), axis=1)
''',
            "multihead_combined": '''
def multihead_combined(X, W_q, b_q, W_k, b_k, W_v, b_v, W_c, H):
    projected = np.stack([X.dot(W_q) + b_q, X.dot(W_k) + b_k, X.dot(W_v) + b_v])  # [3, L, D]
    queries, keys, values = (split_heads(t, H) for t in projected)  # each [H, L, D_H]
    logits = np.matmul(queries / np.sqrt(queries.shape[2]), np.swapaxes(keys, 1, 2))
    top = logits.max(axis=2)[..., None]
    attn = np.exp(logits - top - np.log(np.exp(logits - top).sum(axis=2))[..., None])
    return merge_heads(np.matmul(attn, values)).dot(W_c), attn


def stack_heads(heads):
    names = list(heads[0])
    return dict(zip(names, (np.concatenate([params[n] for params in heads], axis=-1) for n in names)))
''',
            "multihead_columns": '''
def multihead_columns(X, heads, omega_c):
    def column_head(params):
        queries = (params["omega_q"].dot(X) + params["beta_q"]) / np.sqrt(len(params["omega_q"]))
        keys = params["omega_k"].dot(X) + params["beta_k"]
        values = params["omega_v"].dot(X) + params["beta_v"]
        logits = keys.T.dot(queries)
        attn = np.exp(logits - logits.max(axis=0))
        return values.dot(attn / attn.sum(axis=0))

    return omega_c.dot(np.concatenate([column_head(params) for params in heads], axis=0))
''',
            "multihead_module": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, mask=None):
        projected = torch.stack([self.W_q(x), self.W_k(x), self.W_v(x)])  # [3, B, L, D]
        q, k, v = projected.unflatten(-1, (self.num_heads, self.d_head)).permute(0, 1, 3, 2, 4).unbind(0)
        logits = torch.matmul(q * self.d_head ** -0.5, k.transpose(-1, -2))
        if mask is not None:
            logits = logits.masked_fill(mask.logical_not(), -torch.inf)
        attn = logits.softmax(-1)
        return self.W_o(torch.matmul(attn, v).permute(0, 2, 1, 3).flatten(2)), attn
''',
        },
    ),
]
