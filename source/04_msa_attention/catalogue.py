"""Synthetic submissions for 04_msa_attention: realistic mistakes and alternative correct answers."""

from tools.submissions import Submission

TIED = ("test_tied_attention", "test_tied_padding")

#: The complete answers in the two other numeric styles every catalogue carries (issue 25): the submission
#: written in float32 PyTorch and the one in float64 NumPy ("reference": the master's own solution), each
#: earning every point.
PRECISIONS = {"float32 PyTorch": "reference", "float64 NumPy": "alt-numpy-float64"}

SUBMISSIONS = [
    # ---- Part 1: one head ------------------------------------------------------------------
    Submission(
        "column-reshape-not-permute", "made the column view with reshape instead of permute",
        edits=[("row_column_attention", "cols = msa.permute(0, 2, 1, 3).reshape(B * L, S, D)", "cols = msa.reshape(B * L, S, D)")],
        says="the column view is made with reshape instead of permute",
        headline="the column view is made with reshape instead of permute",
        loses=frozenset({"test_column_attention", "test_axis_symmetry"}), in_demo=True,
    ),
    Submission(
        "column-output-not-restored", "reshaped the column output to [B, S, L, D] without permuting back",
        edits=[("row_column_attention", "return out.reshape(B, L, S, D).permute(0, 2, 1, 3), w.reshape(B, L, S, S)",
                "return out.reshape(B, S, L, D), w.reshape(B, L, S, S)")],
        says="the output is not permuted back",
        loses=frozenset({"test_column_attention", "test_axis_symmetry"}), in_demo=True,
    ),
    Submission(
        "softmax-over-queries", "took the softmax over the queries (dim=-2) in the single-head attention",
        edits=[("row_column_attention", "/ math.sqrt(x.shape[-1]), dim=-1)", "/ math.sqrt(x.shape[-1]), dim=-2)")],
        says="is the softmax taken over the wrong axis?",
        loses=frozenset({"test_row_attention", "test_column_attention", "test_axis_symmetry"}),
    ),
    Submission(
        "attend-softmax-no-max", "wrote the one-head softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("row_column_attention", 'weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)',
                's = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])\n    weights = s.exp() / s.exp().sum(dim=-1, keepdim=True)')],
        says="Look for an overflowing exp()",
        loses=frozenset({'test_column_attention', 'test_row_attention'}),
    ),
    Submission(
        "attend-scale-by-keys", "scaled the scores by the square root of the number of keys (L for rows, S for columns)",
        edits=[("row_column_attention", "/ math.sqrt(x.shape[-1])", "/ math.sqrt(x.shape[-2])")],
        says="the scores are scaled by sqrt(L), the sequence length, instead of sqrt(D)",
        headline="the scores are scaled by sqrt(L), the sequence length, instead of sqrt(D)",
        loses=frozenset({"test_row_attention", "test_column_attention", "test_axis_symmetry"}),
    ),
    Submission(
        "attend-scale-global-D", "scaled the one-head scores by sqrt(D), the notebook's global D = 80, instead of the input's width",
        edits=[("row_column_attention", "/ math.sqrt(x.shape[-1]), dim=-1)", "/ math.sqrt(D), dim=-1)")],
        says="reads the notebook's variable D",
        headline="the notebook's D, instead of the square root of this input's width",
        loses=frozenset({"test_row_attention", "test_column_attention", "test_axis_symmetry"}),
    ),
    # ---- Part 2: multi-head ----------------------------------------------------------------
    Submission(
        "multihead-column-reshape", "viewed the columns of the multi-head version with a reshape",
        replace={"multihead_axial": '''
def multihead_row_attention(msa, p, H):
    B, S, L, D = msa.shape
    q, k, v = ((msa @ p[f"W_{n}"] + p[f"b_{n}"]).reshape(B, S, L, H, D // H) for n in "qkv")
    w = torch.softmax(torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(D // H), dim=-1)
    return torch.einsum("bshij,bsjhd->bsihd", w, v).reshape(B, S, L, D), w


def multihead_column_attention(msa, p, H):
    B, S, L, D = msa.shape
    x = msa.reshape(B, L, S, D)  # should be msa.permute(0, 2, 1, 3)
    q, k, v = ((x @ p[f"W_{n}"] + p[f"b_{n}"]).reshape(B, L, S, H, D // H) for n in "qkv")
    w = torch.softmax(torch.einsum("blihd,bljhd->blhij", q, k) / math.sqrt(D // H), dim=-1)
    out = torch.einsum("blhij,bljhd->blihd", w, v).reshape(B, L, S, D)
    return out.reshape(B, S, L, D), w
'''},
        says="the column view is made with reshape instead of permute",
        headline="the column view is made with reshape instead of permute",
        loses=frozenset({"test_multihead_column"}),
    ),
    Submission(
        "multihead-scale-sqrt-D", "scaled the multi-head row scores by sqrt(D) instead of sqrt(D_H)",
        edits=[("multihead_axial", 'torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(D // H)',
                'torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(D)')],
        says="common mistake: the scores are scaled by sqrt(D) instead of sqrt(D_H)",
        loses=frozenset({"test_multihead_row"}),
    ),
    Submission(
        "multihead-row-softmax-no-max", "wrote the multi-head row softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("multihead_axial", 'w = torch.softmax(torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(D // H), dim=-1)',
                'w = torch.einsum("bsihd,bsjhd->bshij", q, k).div(math.sqrt(D // H)).exp()\n    w = w / w.sum(dim=-1, keepdim=True)')],
        says="Look for an overflowing exp()",
        loses=frozenset({'test_multihead_row'}),
    ),
    Submission(
        "multihead-column-softmax-no-max", "wrote the multi-head column softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("multihead_axial", 'w = torch.softmax(torch.einsum("bsihd,btihd->bihst", q, k) / math.sqrt(D // H), dim=-1)',
                'w = torch.einsum("bsihd,btihd->bihst", q, k).div(math.sqrt(D // H)).exp()\n    w = w / w.sum(dim=-1, keepdim=True)')],
        says="Look for an overflowing exp()",
        loses=frozenset({'test_multihead_column'}),
    ),
    Submission(
        "multihead-column-scale-sqrt-S", "scaled the column scores by sqrt(S), the number of sequences attended over",
        edits=[("multihead_axial", 'torch.einsum("bsihd,btihd->bihst", q, k) / math.sqrt(D // H)',
                'torch.einsum("bsihd,btihd->bihst", q, k) / math.sqrt(S)')],
        says="the scores are scaled by sqrt(S), the number of sequences, instead of sqrt(D_H)",
        headline="the scores are scaled by sqrt(S), the number of sequences, instead of sqrt(D_H)",
        loses=frozenset({"test_multihead_column"}),
    ),
    Submission(
        "multihead-column-output-not-restored", "left the multi-head column output in [B, L, S, D] order and reshaped it "
        "to [B, S, L, D]: right at one position (L = 1), wrong at several",
        edits=[("multihead_axial", 'torch.einsum("bihst,btihd->bsihd", w, v).reshape(B, S, L, D)',
                'torch.einsum("bihst,btihd->bishd", w, v).reshape(B, S, L, D)')],
        says="the output is not permuted back",
        headline="the output is not permuted back",
        loses=frozenset({"test_multihead_column"}),
    ),
    # ---- Part 3: tied attention ------------------------------------------------------------
    Submission(
        "tied-no-sqrt-S", "scaled the tied logits by 1/sqrt(D_H), without the sqrt(S) for the sum over rows",
        edits=[("tied_row_attention", "/ torch.sqrt(n_rows * Dh)[:, None, None, None]", "/ math.sqrt(Dh)")],
        says="common mistake: the logits are scaled by 1/sqrt(D_H) only",
        loses=frozenset(TIED), in_demo=True,
    ),
    Submission(
        "tied-average-probabilities", "averaged each row's attention probabilities instead of summing logits",
        edits=[("tied_row_attention",
                'logits = torch.einsum("bsihd,bsjhd->bhij", q, k) / torch.sqrt(n_rows * Dh)[:, None, None, None]\n'
                '    if pos_mask is not None:\n'
                '        logits = logits.masked_fill(~pos_mask[:, None, None, :], float("-inf"))\n'
                '    w = torch.softmax(logits, dim=-1)',
                'logits = torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(Dh)\n'
                '    if pos_mask is not None:\n'
                '        logits = logits.masked_fill(~pos_mask[:, None, None, None, :], float("-inf"))\n'
                '    w = (torch.softmax(logits, dim=-1) * seq_mask[:, :, None, None, None]).sum(1) / n_rows[:, None, None, None]')],
        says="common mistake: the rows' probabilities are averaged instead of summing their logits",
        loses=frozenset(TIED),
    ),
    Submission(
        "tied-padding-ignored", "ignored both padding masks",
        edits=[("tied_row_attention", "    if seq_mask is None:\n", "    seq_mask = None\n    pos_mask = None\n    if seq_mask is None:\n")],
        says="common mistake: the padding is ignored",
        headline="the padding is ignored",
        loses=frozenset({"test_tied_padding"}),
    ),
    Submission(
        "tied-softmax-no-max", "wrote the tied softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("tied_row_attention", 'w = torch.softmax(logits, dim=-1)',
                'w = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)')],
        says="Look for an overflowing exp()",
        loses=frozenset(TIED),  # the padding check's logits near -8e9 underflow exp() to 0 everywhere: 0 / 0
    ),
    Submission(
        "tied-scale-sqrt-L", "scaled the tied logits by 1/sqrt(L * D_H): the row length instead of the number of rows",
        edits=[("tied_row_attention", "/ torch.sqrt(n_rows * Dh)[:, None, None, None]", "/ math.sqrt(L * Dh)")],
        says="the row length, instead of 1/sqrt(S * D_H)",
        headline="the logits are scaled by 1/sqrt(L * D_H), the row length",
        loses=frozenset({"test_tied_attention", "test_tied_padding"}),
    ),
    Submission(
        "tied-mask-renormalised-after-softmax", "zeroed the padded keys' weights after the softmax and renormalised: "
        "exact until the padding's logits lie far above the real ones",
        edits=[("tied_row_attention", """    if pos_mask is not None:
        logits = logits.masked_fill(~pos_mask[:, None, None, :], float("-inf"))
    w = torch.softmax(logits, dim=-1)""", """    w = torch.softmax(logits, dim=-1)
    if pos_mask is not None:
        w = w * pos_mask[:, None, None, :]
        w = w / w.sum(dim=-1, keepdim=True)""")],
        says="logits (to -inf) before the softmax",
        headline="Mask the padded keys' logits (to -inf) before the softmax",
        loses=frozenset({"test_tied_padding"}),
    ),
    Submission(
        "tied-rows-counted-over-batch", "counted the real sequences over the whole batch (seq_mask.sum()) instead of per "
        "alignment: right for a batch of one",
        edits=[("tied_row_attention", "n_rows = seq_mask.sum(dim=1).to(q.dtype)  # [B]", "n_rows = seq_mask.sum().to(q.dtype)"),
               ("tied_row_attention", "/ torch.sqrt(n_rows * Dh)[:, None, None, None]", "/ torch.sqrt(n_rows * Dh)")],
        says="counted over the whole batch",
        headline="counted over the whole batch",
        loses=frozenset(TIED),
    ),
    Submission(
        "tied-pos-mask-ignored", "masked the padded sequences but never the padded positions",
        edits=[("tied_row_attention", """    if pos_mask is not None:
        logits = logits.masked_fill(~pos_mask[:, None, None, :], float("-inf"))
""", "")],
        says="pos_mask is ignored",
        headline="pos_mask is ignored",
        loses=frozenset({"test_tied_padding"}),
    ),
    Submission(
        "tied-seq-mask-ignored", "masked the padded positions but summed over every sequence, padded ones included",
        edits=[("tied_row_attention", """    n_rows = seq_mask.sum(dim=1).to(q.dtype)  # [B]
    q = q * seq_mask[:, :, None, None, None]
""", """    n_rows = torch.full((B,), float(S))
""")],
        says="seq_mask is ignored",
        headline="seq_mask is ignored",
        loses=frozenset({"test_tied_padding"}),
    ),
    Submission(
        "tied-fill-1e9", "filled the padded keys' logits with -1e9 instead of -inf",
        edits=[("tied_row_attention", 'logits.masked_fill(~pos_mask[:, None, None, :], float("-inf"))',
                "logits.masked_fill(~pos_mask[:, None, None, :], -1e9)")],
        says="filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        headline="filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        loses=frozenset({"test_tied_padding"}),
    ),
    Submission(
        "tied-fill-1e4", "filled the padded keys' logits with -1e4 instead of -inf",
        edits=[("tied_row_attention", 'logits.masked_fill(~pos_mask[:, None, None, :], float("-inf"))',
                "logits.masked_fill(~pos_mask[:, None, None, :], -1e4)")],
        says="filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        headline="filled with a finite number (such as -1e9 or -1e4) instead of -inf",
        loses=frozenset({"test_tied_padding"}),
    ),
    Submission(
        "tied-mask-where-after-exp", "took exp() of every logit and dropped the padded keys with torch.where, the "
        "maximum taken over the real keys: the output is right, but exp() of a padded logit thousands above the real "
        "ones is inf, and the gradient through the dropped branch is 0 * inf = NaN",
        edits=[("tied_row_attention", """    if pos_mask is not None:
        logits = logits.masked_fill(~pos_mask[:, None, None, :], float("-inf"))
    w = torch.softmax(logits, dim=-1)""", """    keep = torch.ones(B, L, dtype=torch.bool) if pos_mask is None else pos_mask
    keep = keep[:, None, None, :].expand_as(logits)
    top = logits.masked_fill(~keep, float("-inf")).amax(dim=-1, keepdim=True)
    e = torch.where(keep, torch.exp(logits - top), torch.zeros_like(logits))
    w = e / e.sum(dim=-1, keepdim=True)""")],
        says="the gradient with respect to msa contains NaN or inf",
        headline="the gradient with respect to msa contains NaN or inf",
        loses=frozenset({"test_tied_padding"}),
    ),
    # ---- Part 5 ----------------------------------------------------------------------------
    Submission(
        "entries-full-per-sequence", "counted full attention as S separate L x L maps (forgot cross-sequence pairs)",
        edits=[("score_entries", '"full": H * (S * L) ** 2', '"full": H * S * L * L')],
        headline="wrong count for full attention",
        says='every token is a query and a key',
        loses=frozenset({"test_score_entries"}),
    ),
    Submission(
        "entries-row-not-squared", "counted one score per position for row attention (H * S * L), not an L x L matrix",
        edits=[("score_entries", '"row": H * S * L * L', '"row": H * S * L')],
        says="doubling L should multiply the row count by 4",
        headline="doubling L should multiply the row count by 4",
        loses=frozenset({"test_score_entries"}),
    ),
    # ---- Alternative correct answers -------------------------------------------------------
    Submission(
        "alt-einsum", "single-head row and column attention written with einsum, no reshapes",
        replace={"row_column_attention": '''
def attend(x, p):
    q = torch.einsum("ntd,de->nte", x, p["W_q"]) + p["b_q"]
    k = torch.einsum("ntd,de->nte", x, p["W_k"]) + p["b_k"]
    v = torch.einsum("ntd,de->nte", x, p["W_v"]) + p["b_v"]
    w = torch.einsum("nid,njd->nij", q, k).div(x.shape[-1] ** 0.5).softmax(-1)
    return torch.einsum("nij,njd->nid", w, v), w


def row_attention(msa, p):
    q, k, v = (torch.einsum("bsld,de->bsle", msa, p[f"W_{n}"]) + p[f"b_{n}"] for n in "qkv")
    w = torch.einsum("bsid,bsjd->bsij", q, k).div(msa.shape[-1] ** 0.5).softmax(-1)
    return torch.einsum("bsij,bsjd->bsid", w, v), w


def column_attention(msa, p):
    q, k, v = (torch.einsum("bsld,de->bsle", msa, p[f"W_{n}"]) + p[f"b_{n}"] for n in "qkv")
    w = torch.einsum("bsid,btid->bist", q, k).div(msa.shape[-1] ** 0.5).softmax(-1)
    return torch.einsum("bist,btid->bsid", w, v), w
'''},
        in_demo=True,
    ),
    Submission(
        "alt-permute-reshape", "multi-head and tied attention with view/permute instead of einsum",
        replace={
            "multihead_axial": '''
def _heads(x, p, n, H):
    *lead, D = x.shape
    return (x @ p[f"W_{n}"] + p[f"b_{n}"]).view(*lead, H, D // H)


def multihead_row_attention(msa, p, H):
    B, S, L, D = msa.shape
    q, k, v = (_heads(msa, p, n, H).permute(0, 1, 3, 2, 4) for n in "qkv")  # [B, S, H, L, Dh]
    w = torch.softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, dim=-1)
    return (w @ v).permute(0, 1, 3, 2, 4).reshape(B, S, L, D), w


def multihead_column_attention(msa, p, H):
    B, S, L, D = msa.shape
    x = msa.permute(0, 2, 1, 3)  # [B, L, S, D]
    q, k, v = (_heads(x, p, n, H).permute(0, 1, 3, 2, 4) for n in "qkv")  # [B, L, H, S, Dh]
    w = torch.softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, dim=-1)
    out = (w @ v).permute(0, 1, 3, 2, 4).reshape(B, L, S, D)
    return out.permute(0, 2, 1, 3), w
''',
            "tied_row_attention": '''
def tied_row_attention(msa, p, H, seq_mask=None, pos_mask=None):
    B, S, L, D = msa.shape
    Dh = D // H
    rows = torch.ones(B, S, dtype=torch.bool) if seq_mask is None else seq_mask
    q, k, v = ((msa @ p[f"W_{n}"] + p[f"b_{n}"]).view(B, S, L, H, Dh).permute(0, 3, 1, 2, 4) for n in "qkv")
    q = torch.where(rows[:, None, :, None, None], q, torch.zeros_like(q))
    logits = (q @ k.transpose(-1, -2)).sum(dim=2)  # [B, H, L, L], summed over the rows
    logits = logits / (rows.sum(1).float() * Dh).sqrt().view(B, 1, 1, 1)
    if pos_mask is not None:
        logits = torch.where(pos_mask[:, None, None, :], logits, torch.tensor(float("-inf")))
    w = logits.softmax(dim=-1)
    out = torch.einsum("bhij,bhsjd->bsihd", w, v)
    return out.reshape(B, S, L, D), w
''',
        },
    ),
    Submission(
        "alt-loops", "row and column attention as loops over sequences and positions",
        replace={"row_column_attention": '''
def attend(x, p):
    q, k, v = x @ p["W_q"] + p["b_q"], x @ p["W_k"] + p["b_k"], x @ p["W_v"] + p["b_v"]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)
    return w @ v, w


def row_attention(msa, p):
    B, S, L, D = msa.shape
    out, w = torch.empty(B, S, L, D), torch.empty(B, S, L, L)
    for b in range(B):
        for s in range(S):
            out[b, s], w[b, s] = attend(msa[b, s][None], p)[0][0], attend(msa[b, s][None], p)[1][0]
    return out, w


def column_attention(msa, p):
    B, S, L, D = msa.shape
    out, w = torch.empty(B, S, L, D), torch.empty(B, L, S, S)
    for b in range(B):
        for l in range(L):
            o, a = attend(msa[b, :, l][None], p)
            out[b, :, l], w[b, l] = o[0], a[0]
    return out, w
'''},
    ),
    Submission(
        "alt-numpy-float64", "every attention function in float64 NumPy, float64 tensors returned",
        replace={
            "row_column_attention": '''
def as_array(t):
    return np.asarray(torch.as_tensor(t).detach(), dtype=np.float64)


def softmax_last(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attend(x, p):
    x = as_array(x)
    q, k, v = (x @ as_array(p["W_" + n]) + as_array(p["b_" + n]) for n in "qkv")
    weights = softmax_last(q @ np.swapaxes(k, -1, -2) / np.sqrt(x.shape[-1]))
    return torch.from_numpy(weights @ v), torch.from_numpy(weights)


def row_attention(msa, p):
    B, S, L, D = msa.shape
    out, w = attend(as_array(msa).reshape(B * S, L, D), p)
    return out.reshape(B, S, L, D), w.reshape(B, S, L, L)


def column_attention(msa, p):
    B, S, L, D = msa.shape
    out, w = attend(np.transpose(as_array(msa), (0, 2, 1, 3)).reshape(B * L, S, D), p)
    return out.reshape(B, L, S, D).permute(0, 2, 1, 3), w.reshape(B, L, S, S)
''',
            "multihead_axial": '''
def heads_of(msa, p, H):
    x = as_array(msa)
    B, S, L, D = x.shape
    return [(x @ as_array(p["W_" + n]) + as_array(p["b_" + n])).reshape(B, S, L, H, D // H) for n in "qkv"]


def multihead_row_attention(msa, p, H):
    B, S, L, D = msa.shape
    q, k, v = heads_of(msa, p, H)
    w = softmax_last(np.einsum("bsihd,bsjhd->bshij", q, k) / np.sqrt(D // H))
    return torch.from_numpy(np.einsum("bshij,bsjhd->bsihd", w, v).reshape(B, S, L, D)), torch.from_numpy(w)


def multihead_column_attention(msa, p, H):
    B, S, L, D = msa.shape
    q, k, v = heads_of(msa, p, H)
    w = softmax_last(np.einsum("bsihd,btihd->bihst", q, k) / np.sqrt(D // H))
    return torch.from_numpy(np.einsum("bihst,btihd->bsihd", w, v).reshape(B, S, L, D)), torch.from_numpy(w)
''',
            "tied_row_attention": '''
def tied_row_attention(msa, p, H, seq_mask=None, pos_mask=None):
    B, S, L, D = msa.shape
    q, k, v = heads_of(msa, p, H)
    rows = np.ones((B, S), dtype=bool) if seq_mask is None else as_array(seq_mask) > 0
    q = q * rows[:, :, None, None, None]
    logits = np.einsum("bsihd,bsjhd->bhij", q, k) / np.sqrt(rows.sum(axis=1) * (D // H))[:, None, None, None]
    if pos_mask is not None:
        logits = np.where(as_array(pos_mask)[:, None, None, :] > 0, logits, -np.inf)
    w = softmax_last(logits)
    return torch.from_numpy(np.einsum("bhij,bsjhd->bsihd", w, v).reshape(B, S, L, D)), torch.from_numpy(w)
''',
        },
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (column attention as row attention "
        "of the transposed alignment, tied attention as one product over the rows' concatenated features): an "
        "independent author, whom the similarity report must not flag against the master",
        replace={
            "row_column_attention": '''
def attend(x, p):
    scale = x.shape[-1] ** -0.5
    queries = torch.matmul(x, p["W_q"]).add(p["b_q"]).mul(scale)
    keys = torch.matmul(x, p["W_k"]).add(p["b_k"])
    values = torch.matmul(x, p["W_v"]).add(p["b_v"])
    attn = torch.matmul(queries, keys.mT).softmax(-1)
    return torch.matmul(attn, values), attn


def row_attention(msa, p):
    out, attn = attend(msa.flatten(0, 1), p)
    return out.unflatten(0, msa.shape[:2]), attn.unflatten(0, msa.shape[:2])


def column_attention(msa, p):
    out, attn = row_attention(msa.transpose(1, 2), p)
    return out.transpose(1, 2), attn
''',
            "multihead_axial": '''
def multihead_row_attention(msa, p, H):
    width = msa.shape[-1] // H

    def heads(name):  # [B, S, H, L, D_H]
        return torch.matmul(msa, p["W_" + name]).add(p["b_" + name]).unflatten(-1, (H, width)).transpose(-2, -3)

    attn = torch.matmul(heads("q") * width ** -0.5, heads("k").mT).softmax(-1)
    return torch.matmul(attn, heads("v")).transpose(-2, -3).flatten(-2), attn


def multihead_column_attention(msa, p, H):
    out, attn = multihead_row_attention(msa.transpose(1, 2), p, H)
    return out.transpose(1, 2), attn
''',
            "tied_row_attention": '''
def tied_row_attention(msa, p, H, seq_mask=None, pos_mask=None):
    B, S, L, D = msa.shape
    width = D // H
    real = torch.ones(B, S, dtype=torch.bool) if seq_mask is None else seq_mask.bool()

    def heads(name):  # [B, H, L, S, D_H]
        projected = torch.matmul(msa, p["W_" + name]).add(p["b_" + name])
        return projected.unflatten(-1, (H, width)).permute(0, 3, 2, 1, 4)

    queries = heads("q") * real[:, None, None, :, None]
    logits = torch.matmul(queries.flatten(-2), heads("k").flatten(-2).mT)  # the rows' features side by side
    logits = logits / (real.sum(-1) * width).to(logits.dtype).sqrt()[:, None, None, None]
    if pos_mask is not None:
        logits = logits.masked_fill(pos_mask.logical_not()[:, None, None, :], -torch.inf)
    attn = logits.softmax(-1)
    out = torch.matmul(attn, heads("v").flatten(-2)).unflatten(-1, (S, width))  # [B, H, L, S, D_H]
    return out.permute(0, 3, 2, 1, 4).flatten(-2), attn
''',
            "score_entries": '''
def score_entries(S, L, H, kind):
    row, column = S * L * L, L * S * S
    per_head = {"full": (S * L) ** 2, "row": row, "column": column, "axial": row + column}[kind]
    return int(H * per_head)
''',
        },
    ),
]
