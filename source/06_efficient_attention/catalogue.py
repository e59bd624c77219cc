"""Synthetic submissions for 06_efficient_attention: realistic mistakes and alternative correct answers."""

from tools.submissions import Submission, in_dtype

TILED_ALL = frozenset({"test_tiled", "test_tiled_ragged", "test_tiled_large_scores", "test_tiled_causal"})
CACHE_ALL = frozenset({"test_attend_with_cache", "test_decode", "test_decode_rope"})

#: The master's combine, whole: the mistakes that rewrite it replace all of it (a student's own combine has neither
#: the master's comment nor its guard for two empty blocks).
COMBINE_BODY = ("    # Two empty blocks give m = -inf, and m1 - m would be -inf - (-inf) = nan: there, measure from 0 instead.\n"
                "    m = np.maximum(m1, m2)\n    base = np.where(m == -np.inf, 0.0, m)\n"
                "    return m, s1 * np.exp(m1 - base) + s2 * np.exp(m2 - base)")

#: Every function in PyTorch, for one dtype (``DTYPE`` in the sources): the float64 and the float32 alternatives.
TORCH_ANSWER = {"online": '''
def combine(m1, s1, m2, s2):
    m1, s1, m2, s2 = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (m1, s1, m2, s2))
    m = torch.maximum(m1, m2)
    return m, s1 * torch.exp(m1 - m) + s2 * torch.exp(m2 - m)


def online_softmax_stats(x, block):
    x = torch.as_tensor(x, dtype=torch.DTYPE)
    m, s = torch.tensor(float("-inf"), dtype=torch.DTYPE), torch.tensor(0.0, dtype=torch.DTYPE)
    for chunk in torch.split(x, block):
        top = chunk.max()
        m, s = combine(m, s, top, torch.exp(chunk - top).sum())
    return m.item(), s.item()
''', "tiled": '''
def tiled_attention(Q, K, V, block_q, block_k, causal=False):
    Q, K, V = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (Q, K, V))
    outputs, tiles = [], 0
    for qs, Qi in zip(range(0, Q.shape[0], block_q), torch.split(Q, block_q)):
        qe = qs + Qi.shape[0]
        m = torch.full((Qi.shape[0],), float("-inf"), dtype=torch.DTYPE)
        l = torch.zeros(Qi.shape[0], dtype=torch.DTYPE)
        acc = torch.zeros(Qi.shape[0], V.shape[1], dtype=torch.DTYPE)
        for ks, Kj, Vj in zip(range(0, K.shape[0], block_k), torch.split(K, block_k), torch.split(V, block_k)):
            if causal and ks >= qe:
                continue
            tiles += 1
            S = torch.einsum("qd,kd->qk", Qi, Kj) / Q.shape[1] ** 0.5
            if causal:
                keep = torch.arange(ks, ks + Kj.shape[0])[None, :] <= torch.arange(qs, qe)[:, None]
                S = S.masked_fill(~keep, float("-inf"))
            m_next = torch.maximum(m, S.amax(dim=1))
            P = torch.exp(S - m_next[:, None])
            rescale = torch.exp(m - m_next)
            l = rescale * l + P.sum(dim=1)
            acc = rescale[:, None] * acc + P @ Vj
            m = m_next
        outputs.append(acc / l[:, None])
    return torch.cat(outputs), tiles
''', "cache": '''
def attend_with_cache(q, k, v, K_cache, V_cache):
    t = lambda a: torch.as_tensor(a, dtype=torch.DTYPE)
    q, k, v = t(q), t(k), t(v)
    K_cache = torch.cat([t(K_cache).reshape(-1, k.shape[0]), k[None]])
    V_cache = torch.cat([t(V_cache).reshape(-1, v.shape[0]), v[None]])
    w = torch.softmax(K_cache @ q / q.shape[0] ** 0.5, dim=0)
    return w @ V_cache, K_cache, V_cache


def decode(X, W_q, W_k, W_v):
    X, W_q, W_k, W_v = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (X, W_q, W_k, W_v))
    K_cache, V_cache = X.new_zeros(0, W_k.shape[1]), X.new_zeros(0, W_v.shape[1])
    outputs = []
    for x in X:
        o, K_cache, V_cache = attend_with_cache(x @ W_q, x @ W_k, x @ W_v, K_cache, V_cache)
        outputs.append(o)
    return torch.stack(outputs)
''', "rope": '''
def rope(x, positions, base=10000.0):
    x = torch.as_tensor(x, dtype=torch.DTYPE)
    d = x.shape[1]
    # the angles in float64 whatever DTYPE (the notebook asks for it: near position 10**6 a float32 angle is off by 0.03)
    angle = torch.as_tensor(positions, dtype=torch.float64).reshape(-1, 1) * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cos(angle).to(torch.DTYPE), torch.sin(angle).to(torch.DTYPE)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).reshape(x.shape)


def decode_rope(X, W_q, W_k, W_v, base=10000.0):
    X, W_q, W_k, W_v = (torch.as_tensor(a, dtype=torch.DTYPE) for a in (X, W_q, W_k, W_v))
    K_cache, V_cache = X.new_zeros(0, W_k.shape[1]), X.new_zeros(0, W_v.shape[1])
    outputs = []
    for t, x in enumerate(X):
        q = rope((x @ W_q)[None], [t], base)[0]
        k = rope((x @ W_k)[None], [t], base)[0]
        o, K_cache, V_cache = attend_with_cache(q, k, x @ W_v, K_cache, V_cache)
        outputs.append(o)
    return torch.stack(outputs)
'''}


#: The complete answers in the two other numeric styles every catalogue carries (issue 25): the submission
#: written in float32 PyTorch and the one in float64 NumPy ("reference": the master's own solution), each
#: earning every point. Where a style cannot apply: the notebook asks for float64 in PyTorch; the float32 answer holds on these tests all the same.
PRECISIONS = {"float32 PyTorch": "alt-torch-float32", "float64 NumPy": "reference"}

SUBMISSIONS = [
    # ---- Part 1: the softmax as a running computation -----------------------------------------
    Submission(
        "combine-no-rescale", "added the two blocks' sums without bringing them to the common maximum",
        edits=[("online", COMBINE_BODY, "    m = np.maximum(m1, m2)\n    return m, s1 + s2")],
        says="the sums are added without rescaling to the common maximum",
        headline="the sums are added without rescaling to the common maximum",
        loses=frozenset({"test_combine", "test_online_softmax"}), in_demo=True,
    ),
    Submission(
        "combine-inverted-factor", "rescaled each sum by exp(common maximum - block maximum), upside down",
        edits=[("online", COMBINE_BODY,
                "    m = np.maximum(m1, m2)\n    return m, s1 * np.exp(m - m1) + s2 * np.exp(m - m2)")],
        says="the rescaling factors are inverted",
        loses=frozenset({"test_combine", "test_online_softmax"}),
    ),
    Submission(
        "online-drops-last-block", "stepped through whole blocks only: the shorter last block is never read",
        edits=[("online", "for start in range(0, len(x), block):", "for start in range(0, len(x) - block + 1, block):")],
        says="Is every block read, the shorter last one included?",
        loses=frozenset({"test_online_softmax"}),
    ),
    Submission(
        "online-exp-of-raw-scores", "computed a block's sum as sum(exp(x)) / exp(max): equal on paper, overflows in floats",
        edits=[("online", "np.exp(chunk - top).sum() if top > -np.inf else 0.0  # a block of -inf scores is empty: (-inf, 0)",
                "np.exp(chunk).sum() / np.exp(top)")],
        says="exp(x) overflows",
        loses=frozenset({"test_online_softmax"}),
    ),
    Submission(
        "online-max-starts-at-zero", "started the running maximum at 0 instead of -inf: right while some score is positive",
        edits=[("online", "m, s = -np.inf, 0.0", "m, s = 0.0, 0.0")],
        says="the running maximum starts at 0, not at -inf",
        loses=frozenset({"test_online_softmax"}),
    ),
    # ---- Part 2: tiled attention --------------------------------------------------------------
    Submission(
        "tiled-denominator-not-rescaled", "rescaled the accumulator but not the denominator l",
        edits=[("tiled", "l = alpha * l + P.sum(axis=1)", "l = l + P.sum(axis=1)")],
        says="must be rescaled by exp(m_old - m_new)",
        headline="must be rescaled by exp(m_old - m_new)",
        loses=TILED_ALL, in_demo=True,
    ),
    Submission(
        "tiled-accumulator-not-rescaled", "rescaled the denominator but not the accumulator",
        edits=[("tiled", "acc = alpha[:, None] * acc + P @ V[ks:ke]", "acc = acc + P @ V[ks:ke]")],
        says="must be rescaled by exp(m_old - m_new)",
        headline="must be rescaled by exp(m_old - m_new)",
        loses=TILED_ALL,
    ),
    Submission(
        "tiled-rescale-with-updated-max", "overwrote m before computing alpha, so alpha is exp(0) = 1",
        edits=[("tiled", "            m_new = np.maximum(m, S.max(axis=1))\n            alpha = np.exp(m - m_new)",
                "            m_new = np.maximum(m, S.max(axis=1))\n            m = m_new\n            alpha = np.exp(m - m_new)")],
        says="must be rescaled by exp(m_old - m_new)",
        loses=TILED_ALL,
    ),
    Submission(
        "tiled-max-starts-at-zero", "started each query's running maximum at 0 instead of -inf: right while some score "
        "of the row is above about -745",
        edits=[("tiled", "m = np.full(qe - qs, -np.inf)", "m = np.zeros(qe - qs)")],
        says="does the running maximum start at -inf",
        loses=frozenset({"test_tiled_large_scores"}),
    ),
    Submission(
        "tiled-unscaled", "forgot the 1/sqrt(d) scale of the scores",
        edits=[("tiled", "S = Q[qs:qe] @ K[ks:ke].T * scale", "S = Q[qs:qe] @ K[ks:ke].T")],
        says="the scores are not scaled by 1/sqrt(d)",
        loses=TILED_ALL - {"test_tiled_large_scores"},
    ),
    Submission(
        "tiled-exp-of-raw-scores", "exponentiated the raw scores (no running maximum): right until exp overflows",
        edits=[("tiled", "P = np.exp(S - m_new[:, None])", "P = np.exp(S)"),
               ("tiled", "alpha = np.exp(m - m_new)", "alpha = np.ones_like(m)")],
        says="exp(1000) is inf",
        loses=frozenset({"test_tiled_large_scores", "test_tiled_causal"}),
    ),
    Submission(
        "tiled-scales-q-in-place", "scaled the caller's Q in place (Q *= 1/sqrt(d)) instead of the scores",
        edits=[("tiled", "    scale = 1.0 / math.sqrt(d)\n", "    Q *= 1.0 / math.sqrt(d)\n    scale = 1.0\n")],
        noted="changed its argument Q in place",  # in place: noted at autograde, no point lost (README, Not defended)
        headline="the caller's Q was modified in place",
    ),
    Submission(
        "tiled-drops-last-key-block", "looped over whole key blocks only: the shorter last block is lost",
        edits=[("tiled", "for ks in range(0, L_k, block_k):", "for ks in range(0, L_k - block_k + 1, block_k):")],
        says="the last block is shorter",
        loses=frozenset({"test_tiled_ragged", "test_tiled_large_scores", "test_tiled_causal", "test_tiled_causal_skips"}),
    ),
    Submission(
        "tiled-causal-first-query", "skipped a causal tile when its keys start after the block's FIRST query",
        edits=[("tiled", "if causal and ks > qe - 1:", "if causal and ks > qs:")],
        says='its first key comes after the LAST query of the block',
        loses=frozenset({"test_tiled_causal", "test_tiled_causal_skips", "test_tiled_large_scores"}),
        in_demo=True,
    ),
    Submission(
        "tiled-causal-no-skip", "masked the causal tiles correctly but computed every one of them",
        edits=[("tiled", "            if causal and ks > qe - 1:  # every key of this tile comes after every query of "
                "the block\n                break\n", "")],
        says="Tiles above the diagonal are computed: skip them.",
        loses=frozenset({"test_tiled_causal_skips"}),
    ),
    Submission(
        "tiled-causal-mask-missing", "skipped the tiles above the diagonal but did not mask the diagonal tiles",
        edits=[("tiled", "            if causal:\n                S = np.where(", "            if False:\n                S = np.where(")],
        says="masked entry by entry",
        loses=frozenset({"test_tiled_causal", "test_tiled_large_scores"}),
    ),
    # ---- Part 3: the KV cache -----------------------------------------------------------------
    Submission(
        "tiled-causal-max-before-mask", "took the row maximum of the unmasked scores and zeroed the future after the exp: "
        "right while the future scores no higher than the past",
        edits=[("tiled", "            if causal:\n                S = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], S, -np.inf)\n", ""),
               ("tiled", "            P = np.exp(S - m_new[:, None])\n",
                "            P = np.exp(S - m_new[:, None])\n            if causal:\n"
                "                P = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], P, 0.0)\n")],
        says="before the row maximum is taken",
        headline="mask the scores (to -inf) before the row maximum is taken",
        loses=frozenset({"test_tiled_large_scores", "test_tiled_causal"}),
    ),
    Submission(
        "tiled-causal-tiles-by-formula", "counted the causal tiles with the formula for square blocks, n (n + 1) / 2 "
        "query blocks, instead of in the loop",
        edits=[("tiled", "    return O, tiles", "    if causal:\n        n = -(-L_q // block_q)\n"
                "        tiles = n * (n + 1) // 2\n    return O, tiles")],
        says="Count the tiles your loop computes",
        headline="Count the tiles your loop computes",
        loses=frozenset({"test_tiled_causal_skips"}),
    ),
    Submission(
        "cache-appended-after-use", "attended over the cache first and appended the new key and value afterwards",
        replace={"cache": '''
def attend_with_cache(q, k, v, K_cache, V_cache):
    if len(K_cache) == 0:
        o = np.asarray(v, dtype=float)
    else:
        s = K_cache @ q / math.sqrt(len(q))
        w = np.exp(s - s.max())
        o = (w / w.sum()) @ V_cache
    K_cache = np.concatenate([K_cache, np.asarray(k, dtype=float)[None, :]])
    V_cache = np.concatenate([V_cache, np.asarray(v, dtype=float)[None, :]])
    return o, K_cache, V_cache


def decode(X, W_q, W_k, W_v):
    K_cache, V_cache = np.zeros((0, W_k.shape[1])), np.zeros((0, W_v.shape[1]))
    outputs = []
    for x in X:
        o, K_cache, V_cache = attend_with_cache(x @ W_q, x @ W_k, x @ W_v, K_cache, V_cache)
        outputs.append(o)
    return np.stack(outputs)
'''},
        says="each token must attend to itself too",
        headline="each token must attend to itself too",
        loses=CACHE_ALL, in_demo=True,
    ),
    Submission(
        "cache-softmax-unstable", "wrote the cached step's softmax as exp / sum exp, without the largest score",
        edits=[("cache", "w = np.exp(s - s.max())", "w = np.exp(s)")],
        says="overflow exp()",
        loses=frozenset({"test_attend_with_cache"}),
    ),
    Submission(
        "cache-scaled-by-length", "scaled the cached scores by 1/sqrt(t) (the cache length) instead of 1/sqrt(d_k)",
        edits=[("cache", "s = K_cache @ q / math.sqrt(len(q))", "s = K_cache @ q / math.sqrt(len(K_cache))")],
        says="1/sqrt(d_k), the width of q and k",
        loses=CACHE_ALL,
    ),
    # ---- Part 4: rotary position embeddings ---------------------------------------------------
    Submission(
        "rope-frequency-i-over-d", "gave pair i the frequency base**(-i/d) instead of base**(-2i/d)",
        edits=[("rope", "base ** (-np.arange(0, d, 2) / d)", "base ** (-np.arange(d // 2) / d)")],
        says="base**(-2i/d) (not base**(-i/d))",
        headline="base**(-2i/d) (not base**(-i/d))",
        loses=frozenset({"test_rope", "test_decode_rope"}),
    ),
    Submission(
        "rope-pairs-mixed", "read the pairs as halves (i, i + d/2) but wrote them back as neighbours",
        edits=[("rope", "    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin\n    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos",
                "    h = d // 2\n    out[:, 0::2] = x[:, :h] * cos - x[:, h:] * sin\n    out[:, 1::2] = x[:, :h] * sin + x[:, h:] * cos")],
        says="read and write the same two features",
        loses=frozenset({"test_rope"}),
    ),
    Submission(
        "rope-sign-swapped", "rotated each pair the wrong way: (a cos + b sin, -a sin + b cos)",
        edits=[("rope", "out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin", "out[:, 0::2] = x[:, 0::2] * cos + x[:, 1::2] * sin"),
               ("rope", "out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos", "out[:, 1::2] = -x[:, 0::2] * sin + x[:, 1::2] * cos")],
        says="the rotation turns the wrong way",
        headline="the rotation turns the wrong way",
        loses=frozenset({"test_rope", "test_decode_rope"}),
    ),
    Submission(
        "rope-row-number", "rotated each row by its row number, ignoring the positions it was given",
        edits=[("rope", "angle = np.asarray(positions, dtype=float)[:, None]", "angle = np.arange(len(x), dtype=float)[:, None]")],
        says="not by its row number",
        loses=frozenset({"test_rope", "test_rope_relative", "test_decode_rope"}),
    ),
    Submission(
        "rope-rotates-values", "rotated the values as well as the queries and keys",
        edits=[("rope", "o, K_cache, V_cache = attend_with_cache(q, k, x @ W_v, K_cache, V_cache)",
                "o, K_cache, V_cache = attend_with_cache(q, k, rope((x @ W_v)[None, :], [t], base)[0], K_cache, V_cache)")],
        says="the values are rotated too: RoPE turns queries and keys only",
        headline="the values are rotated too: RoPE turns queries and keys only",
        loses=frozenset({"test_decode_rope"}), in_demo=True,
    ),
    Submission(
        "rope-base-not-passed", "decode_rope did not pass base on to rope (always 10000)",
        edits=[("rope", "q = rope((x @ W_q)[None, :], [t], base)[0]", "q = rope((x @ W_q)[None, :], [t])[0]"),
               ("rope", "k = rope((x @ W_k)[None, :], [t], base)[0]", "k = rope((x @ W_k)[None, :], [t])[0]")],
        says="base is not passed on to rope",
        headline="base is not passed on to rope",
        loses=frozenset({"test_decode_rope"}),
    ),
    Submission(
        "rope-in-place", "rotated the caller's array in place and returned it",
        edits=[("rope", """    out = np.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin
    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos
    return out""", """    a, b = x[:, 0::2].copy(), x[:, 1::2].copy()
    x[:, 0::2] = a * cos - b * sin
    x[:, 1::2] = a * sin + b * cos
    return x""")],
        noted="changed its argument x in place",  # in place: noted at autograde, no point lost (README, Not defended)
        headline="the caller's x was modified in place",
    ),
    Submission(
        "rope-positions-as-array-only", "indexed positions[:, None] directly: a plain list of positions fails",
        edits=[("rope", "angle = np.asarray(positions, dtype=float)[:, None]", "angle = positions[:, None].astype(float)")],
        says="positions may be a plain list",
        headline="positions may be a plain list",
        loses=frozenset({"test_rope", "test_decode_rope"}),
    ),
    # ---- issue 60: scalars where arrays come, finite fills and starts, order, globals, sizes of one, float32 angles
    Submission(
        "combine-python-scalars", "wrote combine with Python's max and math.exp: right on floats, fails on arrays",
        edits=[("online", COMBINE_BODY,
                "    m = max(m1, m2)\n    return m, s1 * math.exp(m1 - m) + s2 * math.exp(m2 - m)")],
        says="combine must also work element by element on arrays",
        headline="combine must also work element by element on arrays",
        loses=frozenset({"test_combine"}),
    ),
    Submission(
        "combine-if-else", "branched on which block has the larger maximum (an if on m1 >= m2): scalars only",
        edits=[("online", COMBINE_BODY,
                "    if m1 >= m2:\n        return m1, s1 + s2 * np.exp(m2 - m1)\n    return m2, s1 * np.exp(m1 - m2) + s2")],
        says="combine must also work element by element on arrays",
        headline="combine must also work element by element on arrays",
        loses=frozenset({"test_combine"}),
    ),
    Submission(
        "combine-np-max-of-both", "took np.max([m1, m2]) for the common maximum: on arrays, the largest of all rows",
        edits=[("online", "m = np.maximum(m1, m2)", "m = np.max([m1, m2])")],
        says="np.maximum(m1, m2) compares element by element",
        headline="np.maximum(m1, m2) compares element by element",
        loses=frozenset({"test_combine"}),
    ),
    Submission(
        "online-max-starts-at-minus-1e9", "started the running maximum at -1e9, 'minus infinity enough': wrong once "
        "every score lies below it",
        edits=[("online", "m, s = -np.inf, 0.0", "m, s = -1e9, 0.0")],
        says="at 0 or at a finite number such as -1e4 or -1e9",
        headline="at 0 or at a finite number such as -1e4 or -1e9",
        loses=frozenset({"test_online_softmax"}),
    ),
    Submission(
        "tiled-max-starts-at-minus-1e9", "started each query's running maximum at -1e9 instead of -inf",
        edits=[("tiled", "m = np.full(qe - qs, -np.inf)", "m = np.full(qe - qs, -1e9)")],
        says="the running maximum must start at -inf (not at 0 or -1e9)",
        headline="the running maximum must start at -inf (not at 0 or -1e9)",
        loses=frozenset({"test_tiled_large_scores"}),
    ),
    Submission(
        "tiled-causal-fill-minus-1e9", "filled the masked (future) scores with -1e9 instead of -inf",
        edits=[("tiled", "S = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], S, -np.inf)",
                "S = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], S, -1e9)")],
        says="masked scores are filled with a finite number (such as -1e4 or -1e9)",
        headline="masked scores are filled with a finite number (such as -1e4 or -1e9)",
        loses=frozenset({"test_tiled_large_scores"}),
    ),
    Submission(
        "tiled-causal-fill-minus-1e4", "filled the masked (future) scores with -1e4, as in half-precision code",
        edits=[("tiled", "S = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], S, -np.inf)",
                "S = np.where(np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None], S, -1e4)")],
        says="masked scores are filled with a finite number (such as -1e4 or -1e9)",
        headline="masked scores are filled with a finite number (such as -1e4 or -1e9)",
        loses=frozenset({"test_tiled_large_scores"}),
    ),
    Submission(
        "tiled-d-from-demo-global", "took d for the scale from the notebook's Q_demo (d = 4), left from trying the demo",
        edits=[("tiled", "scale = 1.0 / math.sqrt(d)", "scale = 1.0 / math.sqrt(Q_demo.shape[1])")],
        says="your code reads the notebook's variable Q_demo",  # at autograde the notebook's variables are hidden
        headline="not from a notebook variable such as Q_demo",
        loses=TILED_ALL | {"test_tiled_causal_skips"},
    ),
    Submission(
        "tiled-squeezed", "returned O.squeeze(): a single query loses its query axis",
        edits=[("tiled", "    return O, tiles", "    return O.squeeze(), tiles")],
        says="no squeeze()",
        headline="no squeeze()",
        loses=frozenset({"test_tiled_ragged"}),
    ),
    Submission(
        "cache-prepends", "put the new key and value first in the caches: attention ignores the order of its keys, so "
        "the output is right",
        edits=[("cache", "K_cache = np.concatenate([K_cache, np.asarray(k, dtype=float)[None, :]])",
                "K_cache = np.concatenate([np.asarray(k, dtype=float)[None, :], K_cache])"),
               ("cache", "V_cache = np.concatenate([V_cache, np.asarray(v, dtype=float)[None, :]])",
                "V_cache = np.concatenate([np.asarray(v, dtype=float)[None, :], V_cache])")],
        says="the new key is put first, above the cached ones (prepended)",
        headline="the new key is put first, above the cached ones (prepended)",
        loses=frozenset({"test_attend_with_cache"}),
    ),
    Submission(
        "cache-scale-from-global-K", "scaled by the width of the notebook's K (16, from the memory cell) instead of q's",
        edits=[("cache", "s = K_cache @ q / math.sqrt(len(q))", "s = K_cache @ q / math.sqrt(K.shape[1])")],
        says="your code reads the notebook's variable K",  # at autograde the notebook's variables are hidden
        headline="not from a notebook variable such as K or Q",
        loses=CACHE_ALL,
    ),
    Submission(
        "decode-squeezed", "returned np.stack(outputs).squeeze(): a single token loses its token axis",
        edits=[("cache", "    return np.stack(outputs)", "    return np.stack(outputs).squeeze()")],
        says="no squeeze()",
        headline="no squeeze()",
        loses=frozenset({"test_decode"}),
    ),
    Submission(
        "rope-keys-only", "decode_rope rotated each key before caching it but used the query as projected",
        edits=[("rope", "q = rope((x @ W_q)[None, :], [t], base)[0]", "q = x @ W_q")],
        says="the keys are rotated but not the query",
        headline="the keys are rotated but not the query",
        loses=frozenset({"test_decode_rope"}),
    ),
    Submission(
        "rope-query-only", "decode_rope rotated the query but cached the keys as projected",
        edits=[("rope", "k = rope((x @ W_k)[None, :], [t], base)[0]", "k = x @ W_k")],
        says="the query is rotated but not the keys",
        headline="the query is rotated but not the keys",
        loses=frozenset({"test_decode_rope"}),
    ),
    Submission(
        "rope-float32-angles", "computed the RoPE angles in float32 (to save memory): 1e-3 to 3e-2 off near position 10**6",
        edits=[("rope", "angle = np.asarray(positions, dtype=float)[:, None] * base ** (-np.arange(0, d, 2) / d)",
                "angle = np.asarray(positions, dtype=np.float32)[:, None] * np.float32(base) ** "
                "(-np.arange(0, d, 2, dtype=np.float32) / np.float32(d))")],
        says="needs float64",
        headline="An angle near 10^6 radians needs float64",
        loses=frozenset({"test_rope"}),
    ),
    Submission(
        "rope-ignores-base", "wrote the frequencies with 10000 instead of the argument base",
        edits=[("rope", "base ** (-np.arange(0, d, 2) / d)", "10000.0 ** (-np.arange(0, d, 2) / d)")],
        says="rope ignores its argument base",
        headline="rope ignores its argument base",
        loses=frozenset({"test_rope", "test_decode_rope"}),
    ),
    # ---- alternatives: correct in another way ---------------------------------------------------
    Submission(
        "alt-torch-float32", "every function in float32 PyTorch (the notebook asks for float64: does float32 hold?)",
        replace=in_dtype(TORCH_ANSWER, "float32"),
    ),
    Submission(
        "alt-torch", "every function in float64 PyTorch (tensors in, tensors out), logsumexp-style statistics",
        replace=in_dtype(TORCH_ANSWER, "float64"),
    ),
    Submission(
        "alt-key-blocks-outer", "the key blocks in the outer loop, running statistics for every query row at once",
        replace={"tiled": '''
def tiled_attention(Q, K, V, block_q, block_k, causal=False):
    L_q, L_k = Q.shape[0], K.shape[0]
    m = np.full(L_q, -np.inf)
    l = np.zeros(L_q)
    acc = np.zeros((L_q, V.shape[1]))
    tiles = 0
    for ks in range(0, L_k, block_k):
        ke = min(L_k, ks + block_k)
        for qs in range(0, L_q, block_q):
            qe = min(L_q, qs + block_q)
            if causal and ks >= qe:
                continue
            tiles += 1
            S = np.einsum("qd,kd->qk", Q[qs:qe], K[ks:ke]) / np.sqrt(Q.shape[1])
            if causal:
                S[np.arange(ks, ke)[None, :] > np.arange(qs, qe)[:, None]] = -np.inf
            new = np.maximum(m[qs:qe], S.max(axis=1))
            P = np.exp(S - new[:, None])
            shrink = np.exp(m[qs:qe] - new)
            l[qs:qe] = l[qs:qe] * shrink + P.sum(axis=1)
            acc[qs:qe] = acc[qs:qe] * shrink[:, None] + P @ V[ks:ke]
            m[qs:qe] = new
    return acc / l[:, None], tiles
'''},
    ),
    Submission(
        "alt-rope-halves", "RoPE with the halves pairing (i, i + d/2), as GPT-NeoX and Llama's Hugging Face code",
        edits=[("rope", "    out = np.empty_like(x)\n    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin\n"
                "    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos\n    return out",
                "    x1, x2 = x[:, : d // 2], x[:, d // 2:]\n"
                "    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=1)")],
        in_demo=True,
    ),
    Submission(
        "alt-cache-preallocated-lists", "the cache kept as lists of rows, stacked for each step; softmax by logsumexp",
        replace={"cache": '''
def attend_with_cache(q, k, v, K_cache, V_cache):
    keys = list(K_cache) + [np.asarray(k, dtype=float)]
    values = list(V_cache) + [np.asarray(v, dtype=float)]
    K_new, V_new = np.array(keys), np.array(values)
    scores = K_new @ np.asarray(q, dtype=float) / np.sqrt(K_new.shape[1])
    top = scores.max()
    log_weights = scores - (top + np.log(np.exp(scores - top).sum()))
    return np.exp(log_weights) @ V_new, K_new, V_new


def decode(X, W_q, W_k, W_v):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    K_cache, V_cache = np.empty((0, K.shape[1])), np.empty((0, V.shape[1]))
    rows = []
    for t in range(X.shape[0]):
        o, K_cache, V_cache = attend_with_cache(Q[t], K[t], V[t], K_cache, V_cache)
        rows.append(o)
    return np.array(rows)
'''},
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (a running log-sum-exp and an "
        "output kept normalised, RoPE as complex rotations, a cache grown with vstack): an independent author, whom "
        "the similarity report must not flag against the master",
        replace={
            "online": '''
def combine(m1, s1, m2, s2):
    m = np.maximum(m1, m2)
    shift = np.where(np.isneginf(m), 0.0, m)  # two empty blocks stay empty
    return m, s1 * np.exp(m1 - shift) + s2 * np.exp(m2 - shift)


def online_softmax_stats(x, block):
    values = np.asarray(x, dtype=float).ravel()
    stats = (-np.inf, 0.0)
    for i in range(0, values.size, block):
        part = values[i:i + block]
        stats = combine(*stats, part.max(), np.exp(part - part.max()).sum())
    return float(stats[0]), float(stats[1])
''',
            "tiled": '''
def tiled_attention(Q, K, V, block_q, block_k, causal=False):
    n_q, n_k = len(Q), len(K)
    out = np.empty((n_q, V.shape[1]))
    computed = 0
    for q0 in range(0, n_q, block_q):
        q1 = min(q0 + block_q, n_q)
        lse = np.full(q1 - q0, -np.inf)  # log of each row's softmax denominator so far
        o = np.zeros((q1 - q0, V.shape[1]))  # each row's output so far, already normalised
        for k0 in range(0, q1 if causal else n_k, block_k):
            k1 = min(k0 + block_k, n_k)
            scores = (Q[q0:q1] @ K[k0:k1].T) / np.sqrt(Q.shape[1])
            computed += 1
            if causal:
                scores[np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None]] = -np.inf
            top = scores.max(axis=1, keepdims=True)
            top[np.isneginf(top)] = 0.0  # a row whose keys here all come later adds nothing
            p = np.exp(scores - top)
            with np.errstate(divide="ignore"):
                tile_lse = top[:, 0] + np.log(p.sum(axis=1))
            new_lse = np.logaddexp(lse, tile_lse)
            # exp(top - new_lse) is at most 1; a row with no key here (top set to 0, p = 0) must not reach exp(+big)
            o = o * np.exp(lse - new_lse)[:, None] + (p @ V[k0:k1]) * np.exp(np.minimum(top[:, 0] - new_lse, 0.0))[:, None]
            lse = new_lse
        out[q0:q1] = o
    return out, computed
''',
            "cache": '''
def attend_with_cache(q, k, v, K_cache, V_cache):
    K_cache = np.vstack([K_cache, np.reshape(k, (1, -1))]).astype(float)
    V_cache = np.vstack([V_cache, np.reshape(v, (1, -1))]).astype(float)
    logits = K_cache.dot(q) / np.sqrt(K_cache.shape[1])
    weights = np.exp(logits - np.logaddexp.reduce(logits))
    return weights.dot(V_cache), K_cache, V_cache


def decode(X, W_q, W_k, W_v):
    caches = (np.empty((0, W_k.shape[1])), np.empty((0, W_v.shape[1])))
    out = np.empty((len(X), W_v.shape[1]))
    for t, row in enumerate(X):
        out[t], *caches = attend_with_cache(row @ W_q, row @ W_k, row @ W_v, *caches)
    return out
''',
            "rope": '''
def rope(x, positions, base=10000.0):
    x = np.asarray(x, dtype=float)
    freqs = base ** (-2.0 * np.arange(x.shape[1] // 2) / x.shape[1])
    turns = np.exp(1j * np.outer(np.asarray(positions, dtype=float), freqs))
    z = (x[:, 0::2] + 1j * x[:, 1::2]) * turns  # each pair as one complex number, rotated
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def decode_rope(X, W_q, W_k, W_v, base=10000.0):
    caches = (np.empty((0, W_k.shape[1])), np.empty((0, W_v.shape[1])))
    out = np.empty((len(X), W_v.shape[1]))
    for t, row in enumerate(X):
        q, k = (rope(np.atleast_2d(row @ W), [t], base)[0] for W in (W_q, W_k))
        out[t], *caches = attend_with_cache(q, k, row @ W_v, *caches)
    return out
''',
        },
    ),
]
