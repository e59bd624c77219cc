"""Synthetic submissions for 07_attention_backward: realistic mistakes and alternative correct answers."""

from tools.submissions import Submission, in_dtype

#: Every cell that calls the student's attention_backward (gqa_backward does, head by head).
BACKWARD_ALL = frozenset({"test_attention_backward", "test_attention_backward_mask", "test_attention_backward_fd",
                          "test_gqa_backward"})
SOFTMAX_BACKWARD_ALL = BACKWARD_ALL | {"test_softmax_backward"}
FLASH_BACKWARD_ALL = frozenset({"test_flash_backward", "test_flash_backward_causal", "test_flash_gradcheck"})

#: Every function in PyTorch, for one dtype (``DTYPE`` in the sources): the float64 and the float32 alternatives.
TORCH_ANSWER = {"jacobian": '''
def softmax_jacobian(p):
    p = torch.as_tensor(p, dtype=torch.DTYPE)
    return torch.diag(p) - torch.outer(p, p)


def softmax_backward(P, dP):
    P, dP = torch.as_tensor(P, dtype=torch.DTYPE), torch.as_tensor(dP, dtype=torch.DTYPE)
    return P * (dP - (P * dP).sum(dim=1, keepdim=True))
''', "backward": '''
def attention_backward(Q, K, V, dO, mask=None):
    Q, K, V, dO = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V, dO))
    S = Q @ K.T / Q.shape[1] ** 0.5
    if mask is not None:
        S = S.masked_fill(~torch.as_tensor(mask, dtype=torch.bool), float("-inf"))
    P = torch.softmax(S, dim=1)
    dS = softmax_backward(P, dO @ V.T)
    return dS @ K / Q.shape[1] ** 0.5, dS.T @ Q / Q.shape[1] ** 0.5, P.T @ dO
''', "flash": '''
def flash_forward(Q, K, V, block_q, block_k, causal=False):
    Q, K, V = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V))
    outputs, lses = [], []
    for qs, Qi in zip(range(0, Q.shape[0], block_q), torch.split(Q, block_q)):
        qe = qs + Qi.shape[0]
        m = torch.full((Qi.shape[0],), float("-inf"), dtype=torch.DTYPE)
        l = torch.zeros(Qi.shape[0], dtype=torch.DTYPE)
        acc = torch.zeros(Qi.shape[0], V.shape[1], dtype=torch.DTYPE)
        for ks, Kj, Vj in zip(range(0, K.shape[0], block_k), torch.split(K, block_k), torch.split(V, block_k)):
            if causal and ks >= qe:
                continue
            S = Qi @ Kj.T / Q.shape[1] ** 0.5
            if causal:
                S = S.masked_fill(torch.arange(ks, ks + Kj.shape[0])[None, :] > torch.arange(qs, qe)[:, None], float("-inf"))
            m_next = torch.maximum(m, S.amax(dim=1))
            P = torch.exp(S - m_next[:, None])
            rescale = torch.exp(m - m_next)
            l = rescale * l + P.sum(dim=1)
            acc = rescale[:, None] * acc + P @ Vj
            m = m_next
        outputs.append(acc / l[:, None])
        lses.append(m + torch.log(l))
    return torch.cat(outputs), torch.cat(lses)


def flash_backward(Q, K, V, O, lse, dO, block_q, block_k, causal=False):
    Q, K, V, O, lse, dO = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V, O, lse, dO))
    scale = Q.shape[1] ** -0.5
    D = (dO * O).sum(dim=1)
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    tiles = 0
    for qs in range(0, Q.shape[0], block_q):
        qe = min(qs + block_q, Q.shape[0])
        for ks in range(0, K.shape[0], block_k):
            ke = min(ks + block_k, K.shape[0])
            if causal and ks >= qe:
                break
            tiles += 1
            S = Q[qs:qe] @ K[ks:ke].T * scale
            if causal:
                S = S.masked_fill(torch.arange(ks, ke)[None, :] > torch.arange(qs, qe)[:, None], float("-inf"))
            P = torch.exp(S - lse[qs:qe, None])
            dV[ks:ke] += P.T @ dO[qs:qe]
            dS = P * (dO[qs:qe] @ V[ks:ke].T - D[qs:qe, None])
            dQ[qs:qe] += dS @ K[ks:ke] * scale
            dK[ks:ke] += dS.T @ Q[qs:qe] * scale
    return dQ, dK, dV, tiles
''', "gqa": '''
def gqa_attention(Q, K, V, causal=False):
    Q, K, V = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V))
    group = Q.shape[0] // K.shape[0]
    K, V = torch.repeat_interleave(K, group, dim=0), torch.repeat_interleave(V, group, dim=0)
    S = Q @ K.transpose(1, 2) / Q.shape[2] ** 0.5
    if causal:
        S = S.masked_fill(~torch.tril(torch.ones(S.shape[1:], dtype=torch.bool)), float("-inf"))
    return torch.softmax(S, dim=2) @ V


def gqa_backward(Q, K, V, dO, causal=False):
    Q, K, V, dO = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V, dO))
    H, G = Q.shape[0], K.shape[0]
    mask = torch.tril(torch.ones(Q.shape[1], K.shape[1], dtype=torch.bool)) if causal else None
    per_head = [attention_backward(Q[h], K[h * G // H], V[h * G // H], dO[h], mask) for h in range(H)]
    dQ = torch.stack([g[0] for g in per_head])
    dK = torch.stack([g[1] for g in per_head]).reshape(G, H // G, *K.shape[1:]).sum(dim=1)
    dV = torch.stack([g[2] for g in per_head]).reshape(G, H // G, *V.shape[1:]).sum(dim=1)
    return dQ, dK, dV
''', "window": '''
def window_attention(Q, K, V, window, block_q, block_k):
    Q, K, V = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V))
    L = Q.shape[0]
    out, tiles = torch.zeros(L, V.shape[1], dtype=torch.DTYPE), 0
    for qs in range(0, L, block_q):
        qe = min(qs + block_q, L)
        m = torch.full((qe - qs,), float("-inf"), dtype=torch.DTYPE)
        l = torch.zeros(qe - qs, dtype=torch.DTYPE)
        acc = torch.zeros(qe - qs, V.shape[1], dtype=torch.DTYPE)
        first_key = max(0, (qs - window + 1) // block_k * block_k)
        for ks in range(first_key, qe, block_k):
            ke = min(ks + block_k, L)
            tiles += 1
            i, j = torch.arange(qs, qe)[:, None], torch.arange(ks, ke)[None, :]
            S = (Q[qs:qe] @ K[ks:ke].T / Q.shape[1] ** 0.5).masked_fill((j > i) | (j <= i - window), float("-inf"))
            m_next = torch.maximum(m, S.amax(dim=1))
            shift = torch.where(torch.isinf(m_next), torch.zeros_like(m_next), m_next)
            P = torch.exp(S - shift[:, None])
            rescale = torch.exp(m - shift)
            l = rescale * l + P.sum(dim=1)
            acc = rescale[:, None] * acc + P @ V[ks:ke]
            m = m_next
        out[qs:qe] = acc / l[:, None]
    return out, tiles
'''}


#: The complete answers in the two numeric styles every catalogue carries: float32 PyTorch and float64 NumPy
#: (the master's own solution), each earning every point.
PRECISIONS = {"float32 PyTorch": "alt-torch-float32", "float64 NumPy": "reference"}

SUBMISSIONS = [
    # ---- Part 1: the backward pass by hand ----------------------------------------------------
    Submission(
        "jacobian-outer-only", "wrote the softmax Jacobian as -p p^T, forgetting its diagonal term",
        edits=[("jacobian", "return np.diag(p) - np.outer(p, p)", "return -np.outer(p, p)")],
        says="the diagonal term diag(p) is missing",
        headline="the diagonal term diag(p) is missing",
        loses=frozenset({"test_softmax_jacobian"}),
    ),
    Submission(
        "jacobian-plus-outer", "wrote diag(p) + p p^T: the sign of the outer product flipped",
        edits=[("jacobian", "return np.diag(p) - np.outer(p, p)", "return np.diag(p) + np.outer(p, p)")],
        says="every row of J sums to zero",
        loses=frozenset({"test_softmax_jacobian"}),
    ),
    Submission(
        "softmax-backward-no-d", "backpropagated through the softmax as dS = P * dP, dropping the D term",
        edits=[("jacobian", "return P * (dP - D)", "return P * dP")],
        says="D is missing",
        headline="D is missing",
        loses=SOFTMAX_BACKWARD_ALL, in_demo=True,
    ),
    Submission(
        "softmax-backward-d-wrong-axis", "summed P * dP down the columns (over queries) for D",
        edits=[("jacobian", "D = (P * dP).sum(axis=1, keepdims=True)", "D = (P * dP).sum(axis=0, keepdims=True)")],
        says="D is summed down the columns",
        loses=SOFTMAX_BACKWARD_ALL,
    ),
    Submission(
        "backward-dq-unscaled", "left the 1/sqrt(d) out of dQ",
        edits=[("backward", "return dS @ K * scale, dS.T @ Q * scale, dV", "return dS @ K, dS.T @ Q * scale, dV")],
        says="dQ is not scaled by 1/sqrt(d)",
        loses=BACKWARD_ALL, in_demo=True,
    ),
    Submission(
        "backward-dk-unscaled", "left the 1/sqrt(d) out of dK",
        edits=[("backward", "return dS @ K * scale, dS.T @ Q * scale, dV", "return dS @ K * scale, dS.T @ Q, dV")],
        says="dK is not scaled by 1/sqrt(d)",
        loses=BACKWARD_ALL,
    ),
    Submission(
        "backward-dk-from-ds", "computed dK from dS instead of its transpose",
        edits=[("backward", "return dS @ K * scale, dS.T @ Q * scale, dV", "return dS @ K * scale, dS @ Q * scale, dV")],
        says="a transpose is missing or extra",
        loses=BACKWARD_ALL,
    ),
    Submission(
        "backward-dv-from-p", "computed dV as P dO instead of P^T dO",
        edits=[("backward", "dV = P.T @ dO", "dV = P @ dO")],
        says="a transpose is missing or extra",
        loses=BACKWARD_ALL,
    ),
    Submission(
        "backward-mask-ignored", "recomputed P in the backward pass without the mask: masked entries get gradient",
        edits=[("backward", "    if mask is not None:\n        S = np.where(mask, S, -np.inf)\n", "")],
        says="the masked entries get gradient",
        loses=frozenset({"test_attention_backward_mask", "test_attention_backward_fd", "test_gqa_backward"}),
        in_demo=True,
    ),
    Submission(
        "backward-softmax-no-max", "recomputed P as exp(S) / sum(exp(S)): right until exp overflows",
        edits=[("backward", "P = np.exp(S - S.max(axis=1, keepdims=True))", "P = np.exp(S)")],
        says="overflowing exp()",
        loses=frozenset({"test_attention_backward_mask"}),
    ),
    Submission(
        "backward-mask-fill-finite", "masked the scores with -1e4 instead of -inf: where the allowed scores are lower "
        "still, the masked keys take the weight",
        edits=[("backward", "S = np.where(mask, S, -np.inf)", "S = np.where(mask, S, -1e4)")],
        says="filled with a finite number",
        loses=frozenset({"test_attention_backward_mask"}),
    ),
    Submission(
        "backward-max-before-mask", "took the row maximum of the scores before masking them: 0/0 once a masked "
        "score is some 745 above the allowed ones",
        edits=[("backward", "S = Q @ K.T * scale\n", "S = Q @ K.T * scale\n    top = S.max(axis=1, keepdims=True)\n"),
               ("backward", "P = np.exp(S - S.max(axis=1, keepdims=True))", "P = np.exp(S - top)")],
        says="the row maximum is taken before masking",
        loses=frozenset({"test_attention_backward_mask"}),
    ),
    Submission(
        "backward-zeroed-after-exp", "zeroed the masked weights after exp() instead of masking the scores: inf * 0 "
        "where a masked score is large",
        edits=[("backward", "    if mask is not None:\n        S = np.where(mask, S, -np.inf)\n"
                "    P = np.exp(S - S.max(axis=1, keepdims=True))\n",
                "    seen = np.ones(S.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)\n"
                "    P = np.exp(S - np.where(seen, S, -np.inf).max(axis=1, keepdims=True)) * seen\n")],
        says="zeroed after exp()",
        loses=frozenset({"test_attention_backward_mask"}),
    ),
    # ---- Part 2: FlashAttention-2's backward pass ---------------------------------------------
    Submission(
        "flash-lse-without-max", "saved log(l) as the logsumexp, forgetting the running maximum",
        edits=[("flash", "lse[qs:qe] = m + np.log(l)", "lse[qs:qe] = np.log(l)")],
        says="lse is log(l) without the running maximum",
        loses=frozenset({"test_flash_forward", "test_flash_gradcheck"}),
    ),
    Submission(
        "flash-max-starts-at-zero", "started each query's running maximum at 0 instead of -inf in the forward pass: right "
        "while some score of the row is above about -745",
        edits=[("flash", "m, l, acc = np.full(qe - qs, -np.inf), np.zeros(qe - qs), np.zeros((qe - qs, d_v))\n"
                "        for ks in range(0, L_k, block_k):",
                "m, l, acc = np.zeros(qe - qs), np.zeros(qe - qs), np.zeros((qe - qs, d_v))\n"
                "        for ks in range(0, L_k, block_k):")],
        says="which starts at -inf",
        loses=frozenset({"test_flash_forward"}),
    ),
    Submission(
        "flash-lse-log-l-exp-m", "saved the logsumexp as log(l * exp(m)): inf or -inf once the scores pass 709 or -745",
        edits=[("flash", "lse[qs:qe] = m + np.log(l)", "lse[qs:qe] = np.log(l * np.exp(m))")],
        says="lse is computed as log(l * exp(m))",
        loses=frozenset({"test_flash_forward"}),
    ),
    Submission(
        "flash-drops-d", "dropped the D term from dS in the tiled backward pass",
        edits=[("flash", "dS = P * (dO[qs:qe] @ V[ks:ke].T - D[qs:qe, None])", "dS = P * (dO[qs:qe] @ V[ks:ke].T)")],
        says="the D term is missing",
        headline="the D term is missing",
        loses=FLASH_BACKWARD_ALL, in_demo=True,
    ),
    Submission(
        "flash-d-from-tile", "computed D inside each tile as rowsum(P * dP) of that tile only",
        edits=[("flash", "dS = P * (dO[qs:qe] @ V[ks:ke].T - D[qs:qe, None])",
                "dP = dO[qs:qe] @ V[ks:ke].T\n            dS = P * (dP - (P * dP).sum(axis=1, keepdims=True))")],
        says="D is computed from one tile",
        loses=FLASH_BACKWARD_ALL,
    ),
    Submission(
        "flash-p-without-lse", "recomputed P as the softmax of the tile's own scores instead of exp(S - lse)",
        edits=[("flash", "P = np.exp(S - lse[qs:qe, None])",
                "P = np.exp(S - S.max(axis=1, keepdims=True))\n            P = P / P.sum(axis=1, keepdims=True)")],
        says="exp(S - lse) with the saved lse",
        loses=FLASH_BACKWARD_ALL,
    ),
    Submission(
        "flash-dq-overwritten", "assigned dQ of a query block (=) instead of adding every key block's term (+=)",
        edits=[("flash", "dQ[qs:qe] += dS @ K[ks:ke] * scale", "dQ[qs:qe] = dS @ K[ks:ke] * scale")],
        says="dQ of a query block is the SUM",
        loses=FLASH_BACKWARD_ALL,
    ),
    Submission(
        "flash-dk-overwritten", "assigned dK of a key block (=) instead of adding every query block's term (+=)",
        edits=[("flash", "dK[ks:ke] += dS.T @ Q[qs:qe] * scale", "dK[ks:ke] = dS.T @ Q[qs:qe] * scale")],
        says="the gradient of a key block is the SUM",
        loses=FLASH_BACKWARD_ALL,
    ),
    Submission(
        "flash-causal-no-skip", "masked the causal tiles correctly in the backward pass but computed every one",
        edits=[("flash", "            if causal and ks > qe - 1:  # every key of the tile comes after every query of "
                "the block\n                continue\n", "")],
        says="Tiles above the diagonal are computed",
        loses=frozenset({"test_flash_backward_causal"}),
    ),
    Submission(
        "flash-causal-first-query", "skipped a causal tile when its keys start after the block's FIRST query",
        edits=[("flash", "if causal and ks > qe - 1:  # every key", "if causal and ks > qs:  # every key")],
        says="that cross the diagonal were skipped",
        loses=frozenset({"test_flash_backward_causal", "test_flash_gradcheck"}),
    ),
    Submission(
        "flash-drops-last-key-block", "looped over whole key blocks only in the backward pass: the shorter last one is lost",
        edits=[("flash", "for ks in range(0, L_k, block_k):  # key blocks outside",
                "for ks in range(0, L_k - block_k + 1, block_k):  # key blocks outside")],
        says="the last, shorter key block",
        loses=FLASH_BACKWARD_ALL,
    ),
    Submission(
        "flash-exp-over-exp-lse", "recomputed P as exp(S) / exp(lse): inf / inf above scores of 709, 0 / 0 below -745",
        edits=[("flash", "P = np.exp(S - lse[qs:qe, None])", "P = np.exp(S) / np.exp(lse[qs:qe, None])")],
        says="exp() of a raw score overflows",
        loses=frozenset({"test_flash_backward", "test_flash_backward_causal"}),
    ),
    Submission(
        "flash-causal-zeroed-after-exp", "zeroed the causal entries of P after exp() instead of masking the scores",
        edits=[("flash", "            if causal:\n                S = np.where(np.arange(ks, ke)[None, :] <= "
                "np.arange(qs, qe)[:, None], S, -np.inf)\n            P = np.exp(S - lse[qs:qe, None])\n",
                "            P = np.exp(S - lse[qs:qe, None])\n            if causal:\n"
                "                P = P * (np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None])\n")],
        says="zeroed after exp()",
        loses=frozenset({"test_flash_backward_causal"}),
    ),
    Submission(
        "flash-causal-fill-finite", "masked the causal scores with -1e4 instead of -inf in the backward pass",
        edits=[("flash", "S, -np.inf)\n            P = np.exp(S - lse[qs:qe, None])",
                "S, -1e4)\n            P = np.exp(S - lse[qs:qe, None])")],
        says="filled with a finite number",
        loses=frozenset({"test_flash_backward_causal"}),
    ),
    # ---- Part 3: grouped-query attention -------------------------------------------------------
    Submission(
        "gqa-heads-tiled", "paired query head h with key/value head h % G (the stack repeated) in the forward pass",
        edits=[("gqa", "attention_forward(Q[h], K[h // group], V[h // group], mask) for h in range(H)",
                "attention_forward(Q[h], K[h % K.shape[0]], V[h % K.shape[0]], mask) for h in range(H)")],
        says="reads key/value head h % G",
        headline="reads key/value head h % G",
        loses=frozenset({"test_gqa_forward"}), in_demo=True,
    ),
    Submission(
        "gqa-backward-heads-tiled", "paired the heads with h % G in the backward pass",
        edits=[("gqa", "g = h // group", "g = h % K.shape[0]")],
        says="reads key/value head h % G",
        loses=frozenset({"test_gqa_backward"}),
    ),
    Submission(
        "gqa-backward-overwritten", "assigned each query head's dK and dV to its group (=) instead of summing them",
        edits=[("gqa", "dK[g] += dk\n        dV[g] += dv", "dK[g] = dk\n        dV[g] = dv")],
        says="keeps the gradient of the last query head of each group",
        loses=frozenset({"test_gqa_backward"}),
    ),
    Submission(
        "gqa-backward-averaged", "averaged the group's gradients instead of summing them",
        edits=[("gqa", "dK[g] += dk\n        dV[g] += dv", "dK[g] += dk / group\n        dV[g] += dv / group")],
        says="averages the group's heads' gradients",
        loses=frozenset({"test_gqa_backward"}),
    ),
    Submission(
        "gqa-heads-div-G", "paired query head h with key/value head h // G (G heads of keys) instead of h // (H // G)",
        edits=[("gqa", "attention_forward(Q[h], K[h // group], V[h // group], mask) for h in range(H)",
                "attention_forward(Q[h], K[h // K.shape[0]], V[h // K.shape[0]], mask) for h in range(H)")],
        says="dividing by the number of key/value heads G",
        loses=frozenset({"test_gqa_forward"}),
    ),
    Submission(
        "gqa-backward-heads-div-G", "paired the heads with h // G in the backward pass",
        edits=[("gqa", "g = h // group", "g = h // K.shape[0]")],
        says="dividing by the number of key/value heads G",
        loses=frozenset({"test_gqa_backward"}),
    ),
    Submission(
        "gqa-causal-forgotten", "never applied the causal mask in grouped-query attention's forward pass",
        edits=[("gqa", "    mask = np.tril(np.ones((L, K.shape[1]), dtype=bool)) if causal else None\n    return np.stack",
                "    mask = None\n    return np.stack")],
        says="the causal mask is not applied",
        loses=frozenset({"test_gqa_forward"}),
    ),
    Submission(
        "gqa-backward-causal-inverted", "built the causal mask of the backward pass with np.triu instead of np.tril",
        edits=[("gqa", "    mask = np.tril(np.ones((L, K.shape[1]), dtype=bool)) if causal else None\n    dQ, dK, dV",
                "    mask = np.triu(np.ones((L, K.shape[1]), dtype=bool)) if causal else None\n    dQ, dK, dV")],
        says="the causal mask is the wrong way round",
        loses=frozenset({"test_gqa_backward"}),
    ),
    # ---- Part 4: sliding-window attention ------------------------------------------------------
    Submission(
        "window-off-by-one", "let query i see keys i - window .. i: one key too many",
        edits=[("window", "(j <= i) & (j > i - window)", "(j <= i) & (j >= i - window)"),
               ("window", "ke - 1 <= qs - window", "ke - 1 < qs - window")],
        says="the window is one key too wide",
        headline="the window is one key too wide",
        loses=frozenset({"test_window", "test_window_skips"}), in_demo=True,
    ),
    Submission(
        "window-or-causal", "joined the causal and the window conditions with OR",
        edits=[("window", "(j <= i) & (j > i - window)", "(j <= i) | (j > i - window)")],
        says="combined with OR",
        loses=frozenset({"test_window"}),
    ),
    Submission(
        "window-no-skip", "masked every tile correctly but computed all of them",
        edits=[("window", "            if ks > qe - 1 or ke - 1 <= qs - window:  # the tile lies wholly outside the "
                "band\n                continue\n", "")],
        says="Some tiles outside the band are computed",
        loses=frozenset({"test_window_skips"}),
    ),
    Submission(
        "window-nan-empty-row", "subtracted a running maximum still at -inf: a row with no key in its tile turns nan",
        edits=[("window", "safe = np.where(np.isneginf(m_new), 0.0, m_new)", "safe = m_new")],
        says="every score is -inf",
        loses=frozenset({"test_window"}),
    ),
    Submission(
        "window-max-starts-at-zero", "started each query's running maximum at 0 instead of -inf: right while some score "
        "of the row is above about -745",
        edits=[("window", "m, l, acc = np.full(qe - qs, -np.inf), np.zeros(qe - qs), np.zeros((qe - qs, d_v))\n"
                "        for ks in range(0, L, block_k):",
                "m, l, acc = np.zeros(qe - qs), np.zeros(qe - qs), np.zeros((qe - qs, d_v))\n"
                "        for ks in range(0, L, block_k):")],
        says="starts at -inf (not at 0",
        loses=frozenset({"test_window"}),
    ),
    Submission(
        "window-tiles-by-formula", "counted the tiles with a formula (the span of each query block's band over block_k), "
        "not in the loop: right when the key blocks line up with the band, wrong when they do not",
        edits=[("window", "    return O, tiles", "    tiles = sum(-(-(min(qs + block_q, L) - max(0, qs - window + 1)) // block_k)\n"
                "                for qs in range(0, L, block_q))\n    return O, tiles")],
        says="Count the tiles your loop computes",
        headline="Count the tiles your loop computes",
        loses=frozenset({"test_window_skips"}),
    ),
    Submission(
        "window-drops-last-query-block", "stepped through the query blocks with range(0, L - block_q + 1, block_q): "
        "the last, shorter query block is never computed",
        edits=[("window", "    for qs in range(0, L, block_q):", "    for qs in range(0, L - block_q + 1, block_q):")],
        says="The last query block",
        headline="The last query block (query 6)",
        loses=frozenset({"test_window", "test_window_skips"}),
    ),
    Submission(
        "window-scales-k-in-place", "scaled the caller's K in place (K *= 1/sqrt(d)) instead of the scores",
        edits=[("window", "    scale = 1.0 / math.sqrt(d)\n    O = np.zeros((L, d_v))",
                "    K *= 1.0 / math.sqrt(d)\n    scale = 1.0\n    O = np.zeros((L, d_v))")],
        noted="changed its argument K in place",  # in place: noted at autograde, no point lost (README, Not defended)
        headline="the caller's K was modified in place",
    ),
    # ---- issue 60: finite fills far below, causal ignored --------------------------------------------
    Submission(
        "backward-mask-fill-minus-1e9", "masked the scores with -1e9 (a common idiom) in the backward pass: right until "
        "every allowed score of a row lies below -1e9",
        edits=[("backward", "S = np.where(mask, S, -np.inf)", "S = np.where(mask, S, -1e9)")],
        says="the masked scores are filled with a finite number",
        headline="the masked scores are filled with a finite number",
        loses=frozenset({"test_attention_backward_mask"}),
    ),
    Submission(
        "flash-causal-fill-minus-1e9", "masked the causal scores with -1e9 in the tiled backward pass",
        edits=[("flash", "S, -np.inf)\n            P = np.exp(S - lse[qs:qe, None])",
                "S, -1e9)\n            P = np.exp(S - lse[qs:qe, None])")],
        says="Wrong only in the rows whose allowed scores all equal -4e10",
        headline="Wrong only in the rows whose allowed scores all equal -4e10",
        loses=frozenset({"test_flash_backward_causal"}),
    ),
    Submission(
        "flash-forward-causal-fill-minus-1e9", "masked the causal scores with -1e9 in the tiled forward pass",
        edits=[("flash", "S, -np.inf)\n            m_new = np.maximum(m, S.max(axis=1))",
                "S, -1e9)\n            m_new = np.maximum(m, S.max(axis=1))")],
        says="Wrong only in the rows whose allowed scores all equal -4e10",
        headline="Wrong only in the rows whose allowed scores all equal -4e10",
        loses=frozenset({"test_flash_forward"}),
    ),
    Submission(
        "flash-forward-causal-ignored", "ignored causal=True in the tiled forward pass (every tile computed, nothing masked)",
        edits=[("flash", "            if causal and ks > qe - 1:\n                break\n", ""),
               ("flash", "            if causal:\n                S = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], "
                "S, -np.inf)\n            m_new", "            m_new")],
        says="causal=True is ignored",
        headline="causal=True is ignored",
        loses=frozenset({"test_flash_forward", "test_flash_gradcheck"}),
    ),
    Submission(
        "window-fill-minus-1e9", "masked the scores outside the band with -1e9 in the sliding-window kernel",
        edits=[("window", "Q[qs:qe] @ K[ks:ke].T * scale, -np.inf)", "Q[qs:qe] @ K[ks:ke].T * scale, -1e9)")],
        says="Wrong only in the rows whose allowed scores all equal -4e10",
        headline="Wrong only in the rows whose allowed scores all equal -4e10",
        loses=frozenset({"test_window"}),
    ),
    Submission(
        "gqa-causal-fill-minus-1e9", "wrote grouped-query attention's forward pass by hand, the causal scores filled with -1e9",
        edits=[("gqa", "    return np.stack([attention_forward(Q[h], K[h // group], V[h // group], mask) for h in range(H)])",
                "    S = np.stack([Q[h] @ K[h // group].T for h in range(H)]) / math.sqrt(Q.shape[2])\n"
                "    if causal:\n        S = np.where(mask, S, -1e9)\n"
                "    P = np.exp(S - S.max(axis=2, keepdims=True))\n    P = P / P.sum(axis=2, keepdims=True)\n"
                "    return np.stack([P[h] @ V[h // group] for h in range(H)])")],
        says="Wrong only in the rows whose allowed scores all equal -4e10",
        headline="Wrong only in the rows whose allowed scores all equal -4e10",
        loses=frozenset({"test_gqa_forward"}),
    ),
    Submission(
        "gqa-mask-from-global", "used the notebook's `mask` (left by the finite-difference cell) as the causal mask in "
        "grouped-query attention instead of building one of the arrays' size",
        edits=[("gqa", "    mask = np.tril(np.ones((L, K.shape[1]), dtype=bool)) if causal else None\n    return np.stack",
                "    return np.stack"),
               ("gqa", "attention_forward(Q[h], K[h // group], V[h // group], mask) for h in range(H)",
                "attention_forward(Q[h], K[h // group], V[h // group], mask if causal else None) for h in range(H)")],
        says="your code reads the notebook's variable mask",  # at autograde the notebook's variables are hidden
        headline="a mask must be [5, 5], built from the arrays you are given",
        loses=frozenset({"test_gqa_forward"}),
    ),
    # ---- Alternative correct answers -----------------------------------------------------------
    Submission("alt-torch-float64", "every function in PyTorch, float64", replace=in_dtype(TORCH_ANSWER, "float64")),
    Submission("alt-torch-float32", "every function in PyTorch, float32", replace=in_dtype(TORCH_ANSWER, "float32")),
    Submission(
        "alt-einsum", "einsum for every product of the backward passes",
        edits=[("backward", "dV = P.T @ dO", "dV = np.einsum('qk,qv->kv', P, dO)"),
               ("backward", "dS = softmax_backward(P, dO @ V.T)", "dS = softmax_backward(P, np.einsum('qv,kv->qk', dO, V))"),
               ("backward", "return dS @ K * scale, dS.T @ Q * scale, dV",
                "return np.einsum('qk,kd->qd', dS, K) * scale, np.einsum('qk,qd->kd', dS, Q) * scale, dV"),
               ("flash", "dQ[qs:qe] += dS @ K[ks:ke] * scale", "dQ[qs:qe] += np.einsum('qk,kd->qd', dS, K[ks:ke]) * scale"),
               ("flash", "dK[ks:ke] += dS.T @ Q[qs:qe] * scale", "dK[ks:ke] += np.einsum('qk,qd->kd', dS, Q[qs:qe]) * scale")],
    ),
    Submission(
        "alt-query-blocks-outer", "the tiled backward pass with the query blocks in the outer loop",
        replace={"flash": '''
def flash_forward(Q, K, V, block_q, block_k, causal=False):
    L_q, d = Q.shape
    L_k, d_v = V.shape
    O, lse = np.zeros((L_q, d_v)), np.zeros(L_q)
    for qs in range(0, L_q, block_q):
        qe = min(qs + block_q, L_q)
        m, l, acc = np.full(qe - qs, -np.inf), np.zeros(qe - qs), np.zeros((qe - qs, d_v))
        for ks in range(0, qe if causal else L_k, block_k):
            ke = min(ks + block_k, L_k)
            S = Q[qs:qe] @ K[ks:ke].T / np.sqrt(d)
            if causal:
                S[np.arange(ks, ke)[None, :] > np.arange(qs, qe)[:, None]] = -np.inf
            m_new = np.maximum(m, S.max(axis=1))
            P = np.exp(S - m_new[:, None])
            l = np.exp(m - m_new) * l + P.sum(axis=1)
            acc = np.exp(m - m_new)[:, None] * acc + P @ V[ks:ke]
            m = m_new
        O[qs:qe] = acc / l[:, None]
        lse[qs:qe] = m + np.log(l)
    return O, lse


def flash_backward(Q, K, V, O, lse, dO, block_q, block_k, causal=False):
    L_q, d = Q.shape
    D = np.einsum("qv,qv->q", dO, O)
    dQ, dK, dV = np.zeros_like(Q, dtype=float), np.zeros_like(K, dtype=float), np.zeros_like(V, dtype=float)
    tiles = 0
    for qs in range(0, L_q, block_q):
        qe = min(qs + block_q, L_q)
        for ks in range(0, qe if causal else K.shape[0], block_k):
            ke = min(ks + block_k, K.shape[0])
            tiles += 1
            S = Q[qs:qe] @ K[ks:ke].T / np.sqrt(d)
            if causal:
                S[np.arange(ks, ke)[None, :] > np.arange(qs, qe)[:, None]] = -np.inf
            P = np.exp(S - lse[qs:qe, None])
            dV[ks:ke] += P.T @ dO[qs:qe]
            dS = P * (dO[qs:qe] @ V[ks:ke].T - D[qs:qe, None]) / np.sqrt(d)
            dQ[qs:qe] += dS @ K[ks:ke]
            dK[ks:ke] += dS.T @ Q[qs:qe]
    return dQ, dK, dV, tiles
'''},
    ),
    Submission(
        "alt-jacobian-per-row", "softmax_backward as each row's Jacobian times its dP row (from softmax_jacobian)",
        edits=[("jacobian", "    D = (P * dP).sum(axis=1, keepdims=True)\n    return P * (dP - D)",
                "    return np.stack([softmax_jacobian(p) @ g for p, g in zip(np.asarray(P), np.asarray(dP))])")],
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (log-sum-exp everywhere, a running "
        "output kept normalised, grouped heads as one batched product): an independent author, whom the similarity "
        "report must not flag against the master",
        replace={
            "jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float).reshape(-1)
    return p[:, None] * (np.eye(p.size) - p[None, :])


def softmax_backward(P, dP):
    return P * dP - P * np.einsum("ij,ij->i", P, dP)[:, None]
''',
            "backward": '''
def attention_backward(Q, K, V, dO, mask=None):
    d = Q.shape[1]
    S = Q @ K.T / np.sqrt(d)
    if mask is not None:
        S = np.where(mask, S, -np.inf)
    P = np.exp(S - np.logaddexp.reduce(S, axis=1, keepdims=True))
    dS = softmax_backward(P, dO @ V.T) / np.sqrt(d)  # the scale folded in once
    return dS @ K, dS.T @ Q, P.T @ dO
''',
            "flash": '''
def flash_forward(Q, K, V, block_q, block_k, causal=False):
    n_q, n_k = len(Q), len(K)
    O, lse = np.empty((n_q, V.shape[1])), np.empty(n_q)
    for q0 in range(0, n_q, block_q):
        q1 = min(q0 + block_q, n_q)
        run_lse, run_o = np.full(q1 - q0, -np.inf), np.zeros((q1 - q0, V.shape[1]))
        for k0 in range(0, q1 if causal else n_k, block_k):
            k1 = min(k0 + block_k, n_k)
            scores = Q[q0:q1] @ K[k0:k1].T / np.sqrt(Q.shape[1])
            if causal:
                scores[np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None]] = -np.inf
            new = np.logaddexp(run_lse, np.logaddexp.reduce(scores, axis=1))
            run_o = run_o * np.exp(run_lse - new)[:, None] + np.exp(scores - new[:, None]) @ V[k0:k1]
            run_lse = new
        O[q0:q1], lse[q0:q1] = run_o, run_lse
    return O, lse


def flash_backward(Q, K, V, O, lse, dO, block_q, block_k, causal=False):
    n_q, n_k = len(Q), len(K)
    scale = Q.shape[1] ** -0.5
    delta = np.einsum("ij,ij->i", dO, O)
    dQ, dK, dV = np.zeros((n_q, Q.shape[1])), np.zeros((n_k, K.shape[1])), np.zeros((n_k, V.shape[1]))
    count = 0
    for k0 in range(0, n_k, block_k):
        k1 = min(k0 + block_k, n_k)
        first = (k0 // block_q) * block_q if causal else 0  # query blocks ending before key k0 see none of it
        for q0 in range(first, n_q, block_q):
            q1 = min(q0 + block_q, n_q)
            count += 1
            scores = Q[q0:q1] @ K[k0:k1].T * scale
            if causal:
                scores[np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None]] = -np.inf
            P = np.exp(scores - lse[q0:q1, None])
            dS = P * (dO[q0:q1] @ V[k0:k1].T - delta[q0:q1, None]) * scale
            dV[k0:k1] += P.T @ dO[q0:q1]
            dQ[q0:q1] += dS @ K[k0:k1]
            dK[k0:k1] += dS.T @ Q[q0:q1]
    return dQ, dK, dV, count
''',
            "gqa": '''
def gqa_attention(Q, K, V, causal=False):
    G = len(K)
    grouped = Q.reshape(G, -1, *Q.shape[1:])  # [G, H / G, L, d]: the heads that share a key and a value
    S = np.matmul(grouped, K[:, None].swapaxes(-1, -2)) / np.sqrt(Q.shape[-1])
    if causal:
        S = np.where(np.tri(S.shape[-2], S.shape[-1], dtype=bool), S, -np.inf)
    P = np.exp(S - np.logaddexp.reduce(S, axis=-1, keepdims=True))
    return np.matmul(P, V[:, None]).reshape(len(Q), Q.shape[1], V.shape[-1])


def gqa_backward(Q, K, V, dO, causal=False):
    G, share = len(K), len(Q) // len(K)
    mask = np.tri(Q.shape[1], K.shape[1], dtype=bool) if causal else None
    grads = [attention_backward(Q[h], K[h // share], V[h // share], dO[h], mask) for h in range(len(Q))]
    dQ = np.stack([g[0] for g in grads])
    dK = np.stack([g[1] for g in grads]).reshape(G, share, *K.shape[1:]).sum(axis=1)
    dV = np.stack([g[2] for g in grads]).reshape(G, share, *V.shape[1:]).sum(axis=1)
    return dQ, dK, dV
''',
            "window": '''
def window_attention(Q, K, V, window, block_q, block_k):
    n = len(Q)
    out = np.empty((n, V.shape[1]))
    count = 0
    for q0 in range(0, n, block_q):
        q1 = min(q0 + block_q, n)
        rows = np.arange(q0, q1)[:, None]
        lse, o = np.full(q1 - q0, -np.inf), np.zeros((q1 - q0, V.shape[1]))
        lowest = max(0, q0 - window + 1)  # the first key any row of the block sees
        for k0 in range(lowest // block_k * block_k, q1, block_k):
            k1 = min(k0 + block_k, n)
            count += 1
            cols = np.arange(k0, k1)[None, :]
            scores = Q[q0:q1] @ K[k0:k1].T / np.sqrt(Q.shape[1])
            scores[(cols > rows) | (cols <= rows - window)] = -np.inf
            new = np.logaddexp(lse, np.logaddexp.reduce(scores, axis=1))
            ref = np.where(np.isneginf(new), 0.0, new)  # a row that has met no key yet
            o = o * np.exp(lse - ref)[:, None] + np.exp(scores - ref[:, None]) @ V[k0:k1]
            lse = new
        out[q0:q1] = o
    return out, count
''',
        },
    ),
]
