"""Synthetic submissions for 03_masking: realistic mistakes and alternative correct answers."""

from tools.submissions import Submission

MASK_LINE = 'scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)'

#: The complete answers in the two other numeric styles every catalogue carries (issue 25): the submission
#: written in float32 PyTorch and the one in float64 NumPy ("reference": the master's own solution), each
#: earning every point. Where a style cannot apply: attention stays in PyTorch (float64): its gradients are checked.
PRECISIONS = {"float32 PyTorch": "reference", "float64 NumPy": "alt-numpy-float64"}

SUBMISSIONS = [
    # ---- Part 1: masks ---------------------------------------------------------------------
    Submission(
        "causal-upper-triangular", "built the causal mask with torch.triu (queries see the future)",
        edits=[("masks", "return torch.tril(torch.ones(L, L, dtype=torch.bool))",
                "return torch.triu(torch.ones(L, L, dtype=torch.bool))")],
        says="Is your mask upper-triangular?",
        headline="Is your mask upper-triangular?",
        loses=frozenset({"test_causal_mask"}), in_demo=True,
    ),
    Submission(
        "padding-mask-wrong-axis", "put the padding mask's length-1 axis last: it masks queries, not keys",
        edits=[("masks", "lengths[:, None])[:, None, :]", "lengths[:, None])[:, :, None]")],
        says="broadcasts over the queries",
        loses=frozenset({"test_padding_mask"}),
    ),
    Submission(
        "padding-mask-list-lengths", "indexed the lengths as a tensor without converting them: a list raises",
        edits=[("masks", "lengths = torch.as_tensor(lengths)\n    ", "")],
        says="The lengths may be a list as well as a tensor",
        loses=frozenset({"test_padding_mask"}),
    ),
    Submission(
        "causal-excludes-diagonal", "built the causal mask strictly below the diagonal: each token is hidden from itself",
        edits=[("masks", "return torch.tril(torch.ones(L, L, dtype=torch.bool))",
                "return torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=-1)")],
        says="query i must see key i",
        headline="query i must see key i, its own token",
        loses=frozenset({"test_causal_mask"}),
    ),
    # ---- Part 2: attention -----------------------------------------------------------------
    Submission(
        "fill-zero", "filled masked scores with 0 instead of -inf",
        edits=[("attention", MASK_LINE, 'scores = scores.masked_fill(~mask, 0.0).masked_fill(~has_key, 0.0)')],
        says="masked positions must get exactly 0 (fill -inf before the softmax)",
        headline="masked positions must get exactly 0",
        loses=frozenset({"test_attention_padding", "test_attention_causal", "test_attention_large_scores",
                         "test_attention_fully_masked", "test_one_query"}), in_demo=True,
    ),
    Submission(
        "mask-after-softmax", "zeroed the masked weights after the softmax without renormalising",
        edits=[("attention", "weights = torch.softmax(scores, dim=-1) * has_key",
                "weights = torch.softmax(Q @ K.transpose(-2, -1) / (math.sqrt(Q.shape[-1]) if scale else 1.0), dim=-1) * mask")],
        says="After masking, each query's remaining weights must still sum to 1.",
        loses=frozenset({"test_attention_padding", "test_attention_causal", "test_attention_large_scores",
                         "test_attention_fully_masked", "test_one_query"}),
    ),
    Submission(
        "nan-fully-masked", "did not handle queries whose keys are all masked (NaN)",
        edits=[("attention", MASK_LINE, 'scores = scores.masked_fill(~mask, float("-inf"))'),
               ("attention", "weights = torch.softmax(scores, dim=-1) * has_key", "weights = torch.softmax(scores, dim=-1)")],
        says="NaN",
        loses=frozenset({"test_attention_fully_masked"}), in_demo=True,
    ),
    Submission(
        "mask-renormalised-after-softmax", "zeroed the masked weights after the softmax and renormalised (a fully masked "
        "row kept at 0): exact until the masked scores lie far above the allowed ones",
        edits=[("attention", MASK_LINE + "\n        weights = torch.softmax(scores, dim=-1) * has_key",
                "weights = torch.softmax(scores, dim=-1) * mask\n"
                "        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-30)")],
        says="mask the scores (to -inf) before the softmax",
        headline="mask the scores (to -inf) before the softmax",
        loses=frozenset({"test_attention_large_scores", "test_one_query"}),
    ),
    Submission(
        "fill-minus-100", "filled masked scores with -100 instead of -inf",
        edits=[("attention", MASK_LINE, 'scores = scores.masked_fill(~mask, -100.0).masked_fill(~has_key, 0.0)')],
        says="masked positions must get exactly 0",
        loses=frozenset({"test_attention_padding", "test_attention_large_scores", "test_one_query"}),
    ),
    Submission(
        "fill-minus-1e4", "filled masked scores with -1e4: exp(-1e4) is 0, so it passes until real scores are below -1e4",
        edits=[("attention", MASK_LINE, 'scores = scores.masked_fill(~mask, -1e4).masked_fill(~has_key, 0.0)')],
        says="common mistake: masked scores are filled with a finite value",
        loses=frozenset({"test_attention_large_scores", "test_one_query"}),
    ),
    Submission(
        "fill-minus-1e9", "filled masked scores with -1e9 (a common idiom), finite all the same",
        edits=[("attention", MASK_LINE, 'scores = scores.masked_fill(~mask, -1e9).masked_fill(~has_key, 0.0)')],
        says="common mistake: masked scores are filled with a finite value",
        loses=frozenset({"test_attention_large_scores", "test_one_query"}),
    ),
    Submission(
        "softmax-no-max", "wrote the softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("attention", "weights = torch.softmax(scores, dim=-1)\n    else",
                "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)\n    else"),
               ("attention", "weights = torch.softmax(scores, dim=-1) * has_key",
                "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True) * has_key")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_attention_unmasked", "test_attention_large_scores", "test_one_query"}),
    ),
    Submission(
        "no-scaling", "ignored the scale flag: never divided by sqrt(d_k)",
        edits=[("attention", "    if scale:\n        scores = scores / math.sqrt(Q.shape[-1])\n", "")],
        says="common mistake: the scores are not scaled",
        loses=frozenset({"test_attention_unmasked", "test_attention_padding", "test_attention_causal",
                         "test_attention_fully_masked", "test_one_query"}),
    ),
    Submission(
        "scale-by-d_v", "divided the scores by sqrt(d_v) instead of sqrt(d_k)",
        edits=[("attention", "math.sqrt(Q.shape[-1])", "math.sqrt(V.shape[-1])")],
        says="common mistake: the scores are divided by sqrt(d_v) instead of sqrt(d_k)",
        loses=frozenset({"test_attention_unmasked", "test_attention_padding", "test_attention_causal",
                         "test_attention_fully_masked"}),
    ),
    Submission(
        "float-mask-not-converted", "used ~mask on the mask as given: a 0/1 float mask raises (only booleans were tried)",
        edits=[("attention", "mask = torch.as_tensor(mask).bool().expand(scores.shape)",
                "mask = torch.as_tensor(mask).expand(scores.shape)")],
        says="convert it with mask.bool() first",
        headline="A 0/1 float mask means the same as a boolean one",
        loses=frozenset({"test_attention_padding"}),
    ),
    Submission(
        "int-mask-not-converted", "converted float masks only (if mask.is_floating_point()): a 0/1 integer mask "
        "reaches ~mask and raises",
        edits=[("attention", "mask = torch.as_tensor(mask).bool().expand(scores.shape)",
                "mask = torch.as_tensor(mask)\n        mask = (mask.bool() if mask.is_floating_point() else mask)"
                ".expand(scores.shape)")],
        says="A 0/1 integer mask means the same as a boolean one",
        headline="A 0/1 integer mask means the same as a boolean one",
        loses=frozenset({"test_attention_padding"}),
    ),
    # ---- Parts 3 and 5 ---------------------------------------------------------------------
    Submission(
        "one-query-unscaled", "used plain dot products in the one-query attention",
        edits=[("one_query_attention", "out, w = attention(query[:, None, :], keys, values, mask=m)",
                "out, w = attention(query[:, None, :], keys, values, mask=m, scale=False)")],
        says="common mistake: the scores are not scaled by 1/sqrt(D)",
        headline="not scaled by 1/sqrt(D)",
        loses=frozenset({"test_one_query"}),
    ),
    Submission(
        "entropy-nan", "computed -sum(a * log a) directly, which is NaN for weights of exactly 0",
        edits=[("entropy_and_variance", "return -torch.xlogy(weights, weights).sum(dim=dim)",
                "return -(weights * torch.log(weights)).sum(dim=dim)")],
        says="NaN",
        headline="0 log 0 is 0",
        loses=frozenset({"test_entropy"}), in_demo=True,
    ),
    Submission(
        "variance-of-scaled-scores", "measured the variance of the scaled scores (about 1) instead of q.k",
        edits=[("entropy_and_variance", "return float(torch.var((q * k).sum(dim=-1)))",
                "return float(torch.var((q * k).sum(dim=-1) / d_k ** 0.5))")],
        says="the variance of the scaled scores",
        headline="about 1 is the variance of the scaled scores",
        loses=frozenset({"test_score_variance"}),
    ),
    Submission(
        "entropy-last-axis", "summed the entropy over the last axis whatever dim is given",
        edits=[("entropy_and_variance", "return -torch.xlogy(weights, weights).sum(dim=dim)",
                "return -torch.xlogy(weights, weights).sum(dim=-1)")],
        says="the entropy is taken along the last axis instead of dim",
        headline="the entropy is taken along the last axis instead of dim",
        loses=frozenset({"test_entropy"}),
    ),
    Submission(
        "variance-population", "returned the population variance (divided by n, not n - 1)",
        edits=[("entropy_and_variance", "return float(torch.var((q * k).sum(dim=-1)))",
                "return float(((q * k).sum(dim=-1) - (q * k).sum(dim=-1).mean()).pow(2).mean())")],
        says="the population variance (correction=0) is used",
        headline="the population variance (correction=0) is used",
        loses=frozenset({"test_score_variance"}),
    ),
    # ---- issue 60: finite fills, ignored arguments, globals, axes of length 1, NaN gradients --------------
    Submission(
        "padding-mask-length-from-lengths", "made the mask as long as the longest sequence instead of the padded length L",
        edits=[("masks", "return (torch.arange(L)[None, :] < lengths[:, None])[:, None, :]",
                "return (torch.arange(int(lengths.max()))[None, :] < lengths[:, None])[:, None, :]")],
        says="The key axis has the padded length L = 6 you are given",
        headline="The key axis has the padded length L = 6 you are given",
        loses=frozenset({"test_padding_mask"}),
    ),
    Submission(
        "one-query-fill-minus-1e9", "wrote its own one-query attention and filled the padded scores with -1e9 (a common "
        "idiom): exp(-1e9) is 0, so it passes until every real key scores below -1e9",
        replace={"one_query_attention": '''
def one_query_attention(query, keys, values, mask=None):
    scores = torch.einsum("bd,bsd->bs", query, keys) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(torch.as_tensor(mask) == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bs,bsd->bd", weights, values), weights
'''},
        says="padded scores are filled with a finite value",
        headline="padded scores are filled with a finite value",
        loses=frozenset({"test_one_query"}),
    ),
    Submission(
        "one-query-where-after-exp", "wrote its own masked softmax: exp(score - the real keys' maximum), padded entries "
        "zeroed by torch.where afterwards: the outputs are right, but exp of a padded score far above the real ones is "
        "inf, and its gradient NaN",
        replace={"one_query_attention": '''
def one_query_attention(query, keys, values, mask=None):
    scores = torch.einsum("bd,bsd->bs", query, keys) / math.sqrt(query.shape[-1])
    keep = torch.ones_like(scores, dtype=torch.bool) if mask is None else torch.as_tensor(mask) != 0
    top = scores.masked_fill(~keep, float("-inf")).amax(dim=-1, keepdim=True)
    e = torch.where(keep, torch.exp(scores - top), torch.zeros_like(scores))
    weights = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("bs,bsd->bd", weights, values), weights
'''},
        says="are right, but the gradient with respect to the query contains NaN or inf",
        headline="are right, but the gradient with respect to the query contains NaN or inf",
        loses=frozenset({"test_one_query"}),
    ),
    Submission(
        "one-query-squeeze", "removed the query axis with .squeeze(): right until the batch or the sequence has length 1",
        edits=[("one_query_attention", "return out[:, 0], w[:, 0]", "return out.squeeze(), w.squeeze()")],
        says=".squeeze() with no axis removes EVERY axis of length 1",
        headline=".squeeze() with no axis removes EVERY axis of length 1",
        loses=frozenset({"test_one_query"}),
    ),
    Submission(
        "one-query-scores-squeeze", "computed the scores as bmm(keys, query[:, :, None]).squeeze(): with one key per "
        "sequence the key axis goes too",
        replace={"one_query_attention": '''
def one_query_attention(query, keys, values, mask=None):
    scores = torch.bmm(keys, query[:, :, None]).squeeze() / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(torch.as_tensor(mask) == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights[:, None, :], values)[:, 0], weights
'''},
        says="An axis of length 1 was lost",
        headline="An axis of length 1 was lost",
        loses=frozenset({"test_one_query"}),
    ),
    Submission(
        "one-query-scale-from-global", "scaled the one-query scores by the D of the notebook's k1 instead of the keys given",
        replace={"one_query_attention": '''
def one_query_attention(query, keys, values, mask=None):
    scores = torch.einsum("bd,bsd->bs", query, keys) / math.sqrt(k1.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(torch.as_tensor(mask) == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bs,bsd->bd", weights, values), weights
'''},
        says="your code reads the notebook's variable k1",  # at autograde the notebook's variables are hidden
        headline="the D of the notebook's q1 and k1",
        loses=frozenset({"test_one_query"}),
    ),
    Submission(
        "attention-scale-from-global", "divided the scores by the sqrt(d_k) of the notebook's Q_demo, not of the Q given",
        edits=[("attention", "scores = scores / math.sqrt(Q.shape[-1])", "scores = scores / math.sqrt(Q_demo.shape[-1])")],
        says="your code reads the notebook's variable Q_demo",  # at autograde the notebook's variables are hidden
        headline="the d_k of the notebook's Q_demo and K_demo",
        loses=frozenset({"test_attention_unmasked", "test_attention_padding", "test_attention_causal",
                         "test_attention_fully_masked", "test_attention_large_scores", "test_one_query"}),
    ),
    Submission(
        "attention-scale-flag-ignored", "scaled the scores whatever the scale flag says",
        edits=[("attention", "    if scale:\n        scores = scores / math.sqrt(Q.shape[-1])",
                "    scores = scores / math.sqrt(Q.shape[-1])")],
        says="the scores are divided by sqrt(d_k) even though scale=False",
        headline="even though scale=False",
        loses=frozenset({"test_attention_unmasked"}),
    ),
    Submission(
        "attention-weights-always-returned", "returned the weights even with return_weights=False",
        edits=[("attention", "return (output, weights) if return_weights else (output, None)", "return output, weights")],
        says="with return_weights=False the second value returned must be None",
        headline="with return_weights=False the second value returned must be None",
        loses=frozenset({"test_attention_unmasked"}),
    ),
    Submission(
        "attention-additive-nan-to-num", "an additive -inf mask, then torch.nan_to_num on the weights to repair a query "
        "with no key: the outputs are right, the gradients NaN",
        replace={"attention": '''
def attention(Q, K, V, mask=None, scale=True, return_weights=True):
    scores = Q @ K.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros(scores.shape).masked_fill(~torch.as_tensor(mask).bool(), float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    output = weights @ V
    return (output, weights) if return_weights else (output, None)
'''},
        says="the gradient with respect to Q contains NaN",
        headline="are right, but the gradient with respect to Q contains NaN",
        loses=frozenset({"test_attention_fully_masked"}),
    ),
    # ---- Alternative correct answers -------------------------------------------------------
    Submission(
        "alt-torch-where", "masking with torch.where, fully masked rows zeroed with torch.where",
        replace={"attention": '''
def attention(Q, K, V, mask=None, scale=True, return_weights=True):
    scores = torch.matmul(Q, K.transpose(-1, -2))
    if scale:
        scores = scores * Q.size(-1) ** -0.5
    if mask is not None:
        allowed = (mask != 0).expand_as(scores)
        any_key = allowed.any(-1, keepdim=True)
        scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
        scores = torch.where(any_key, scores, torch.zeros_like(scores))
        weights = torch.where(any_key, torch.softmax(scores, -1), torch.zeros_like(scores))
    else:
        weights = torch.softmax(scores, -1)
    return torch.matmul(weights, V), (weights if return_weights else None)
'''},
        in_demo=True,
    ),
    Submission(
        "alt-fill-finfo-min", "masked scores filled with the smallest float of their dtype, then the softmax",
        edits=[("attention", MASK_LINE,
                'scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).masked_fill(~has_key, 0.0)')],
    ),
    Submission(
        "alt-additive-mask", "an additive mask: 0 where allowed, -inf where blocked",
        replace={"attention": '''
def attention(Q, K, V, mask=None, scale=True, return_weights=True):
    d_k = Q.shape[-1]
    scores = torch.einsum("bqd,bkd->bqk", Q, K) / (d_k ** 0.5 if scale else 1.0)
    if mask is None:
        weights = scores.softmax(dim=-1)
    else:
        mask = mask.bool()
        additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        scores = scores + additive
        empty = torch.isinf(scores).all(dim=-1, keepdim=True)
        weights = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)
    out = torch.einsum("bqk,bkv->bqv", weights, V)
    if return_weights:
        return out, weights
    return out, None
'''},
    ),
    Submission(
        "alt-nan-to-zero", "masked_fill with -inf, then the NaN of fully masked rows replaced by 0",
        replace={"attention": '''
def attention(Q, K, V, mask=None, scale=True, return_weights=True):
    scores = Q @ K.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(K.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    weights = weights.masked_fill(torch.isnan(weights), 0.0)
    out = weights @ V
    return out, weights if return_weights else None
'''},
    ),
    Submission(
        "alt-numpy-float64", "masks and entropy in float64 NumPy, attention in float64 PyTorch (its gradients are "
        "checked, so it stays in PyTorch), float64 tensors returned",
        replace={
            "masks": '''
def causal_mask(L):
    return torch.from_numpy(np.tril(np.ones((L, L), dtype=bool)))


def padding_mask(lengths, L):
    lengths = np.asarray(lengths).reshape(-1)
    return torch.from_numpy(np.arange(L)[None, None, :] < lengths[:, None, None])
''',
            "attention": '''
def attention(Q, K, V, mask=None, scale=True, return_weights=True):
    Q, K, V = Q.double(), K.double(), V.double()
    scores = torch.einsum("bqd,bkd->bqk", Q, K)
    if scale:
        scores = scores / Q.shape[-1] ** 0.5
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else torch.as_tensor(mask) != 0
    allowed = allowed.expand(scores.shape)
    scores = torch.where(allowed, scores, torch.full_like(scores, -torch.inf))
    top = scores.amax(dim=-1, keepdim=True).clamp(min=-1e300)  # a row with no key: nothing to subtract
    e = torch.exp(torch.where(allowed, scores - top, torch.zeros_like(scores))) * allowed
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    output = weights @ V
    return output, (weights if return_weights else None)
''',
            "one_query_attention": '''
def one_query_attention(query, keys, values, mask=None):
    m = None if mask is None else torch.as_tensor(mask)[:, None, :] != 0
    out, w = attention(query.unsqueeze(1), keys, values, mask=m)
    return out.squeeze(1), w.squeeze(1)
''',
            "entropy_and_variance": '''
def entropy(weights, dim=-1):
    w = np.asarray(torch.as_tensor(weights).detach(), dtype=np.float64)
    terms = np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)
    return torch.from_numpy(-terms.sum(axis=dim))


def score_variance(d_k, n, generator):
    q = torch.randn(n, d_k, generator=generator).numpy().astype(np.float64)
    k = torch.randn(n, d_k, generator=generator).numpy().astype(np.float64)
    return float(np.var((q * k).sum(axis=-1), ddof=1))
''',
        },
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (einsum, torch.where, a stacked "
        "padding mask): an independent author, whom the similarity report must not flag against the master",
        replace={
            "masks": '''
def causal_mask(L):
    positions = torch.arange(L)
    return positions[:, None] >= positions[None, :]


def padding_mask(lengths, L):
    lengths = lengths if torch.is_tensor(lengths) else torch.tensor(lengths, dtype=torch.long)
    real = torch.arange(L).expand(len(lengths), L) < lengths.view(-1, 1)
    return real.unsqueeze(1)
''',
            "attention": '''
def attention(Q, K, V, mask=None, scale=True, return_weights=True):
    logits = torch.einsum("...qd,...kd->...qk", Q, K)
    if scale:
        logits = logits * Q.size(-1) ** -0.5
    if mask is None:
        weights = torch.softmax(logits, -1)
    else:
        allowed = torch.broadcast_to(torch.as_tensor(mask) != 0, logits.shape)
        anything = allowed.any(-1, keepdim=True)
        logits = torch.where(allowed, logits, torch.full_like(logits, float("-inf")))
        logits = torch.where(anything, logits, torch.zeros_like(logits))
        weights = torch.softmax(logits, -1) * anything
    out = torch.einsum("...qk,...kd->...qd", weights, V)
    return out, (weights if return_weights else None)
''',
            "one_query_attention": '''
def one_query_attention(query, keys, values, mask=None):
    m = None if mask is None else torch.as_tensor(mask).reshape(keys.shape[0], 1, -1)
    out, w = attention(query.unsqueeze(-2), keys, values, mask=m)
    return out.squeeze(-2), w.squeeze(-2)
''',
            "entropy_and_variance": '''
def entropy(weights, dim=-1):
    safe = torch.where(weights > 0, weights, torch.ones_like(weights))
    return -(weights * torch.log(safe)).sum(dim)


def score_variance(d_k, n, generator):
    queries = torch.randn(n, d_k, generator=generator)
    keys = torch.randn(n, d_k, generator=generator)
    return torch.einsum("nd,nd->n", queries, keys).var().item()
''',
        },
    ),
]
