"""The similarity report by part, and by rarity (:mod:`.similarity`; issue 61).

**Parts.** A hand-in's normalised code is cut into its parts: each function or class the release names (the answer
to one question: ``attention_by_token``, ``tiled_attention``), with the helpers of the student's own it calls
(:func:`split_parts`). Each part is fingerprinted alone (copydetect, as the whole) and compared with the same part
of every other hand-in that shares a fingerprint of it, so one function copied alone, or half of a hand-in taken
from each of two authors, is seen however different the rest is: a pair's score is the strongest of its evidence,
the whole hand-in or its most shared part (:func:`part_pairs`).

**Rarity.** A part's fingerprint counts by how rare it is in that part across the class: one found in ``n``
hand-ins weighs ``min(1, 4 / (n + 2))`` (only the pair: 1), times :data:`.fingerprints.CORPUS_WEIGHT` where the
master's answer to that part has it (what independent correct answers write). A part's score is the mean share of
each side's part found in the other, times ``min(1, rare / RARE_TOKENS)``, ``rare`` being the shared tokenised
characters weighed so (:func:`rare_tokens`): what only two hand-ins share counts fully, the short idiomatic answer
that many write (or the master's own) counts for little, so two honest authors who both wrote ``softmax`` the
obvious way stay unflagged. Several parts that are the same on both sides (each side's share at least
:data:`SAME_PART`) count together, as one part (halves taken from an author: many short functions each). The
whole's score is discounted by size alone (:data:`RARE_WHOLE`, in :func:`.similarity.compare`): its shares
already weigh the master's code less, and the common-code cut has left out what many share.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from .fingerprints import CORPUS_WEIGHT, covered, fingerprint

#: The rare shared tokenised characters (identifiers count one each) that make a score count fully: a short
#: function (``softmax``: about 60) cannot be told from convergence, ``attention_by_token`` (about 230) can.
RARE_TOKENS = 150
#: The code two whole hand-ins must share, common code included, for their score to count fully: a hand-in copied
#: whole is a copy even when most of it is common code or the master's; two hand-ins of three short idiomatic
#: answers each (about 170 to 250 characters) are not.
RARE_WHOLE = 400
#: The share of each side's part found in the other that makes two parts the same; several parts the same count
#: together, as one part of their rare tokens together, scoring at most this.
SAME_PART = 0.9
#: Parts shown as evidence of a pair (the best first), and the least score a part must have to be shown.
SHOWN_PARTS, PART_SHOWN = 4, 0.3


def split_parts(code: str, api: frozenset) -> dict[str, str]:
    """A hand-in's normalised code cut into its parts: name -> the definition of each top-level function or class
    the release names, with the definitions (not the release's) it calls, directly or not, after it."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    calls = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defs and n.id != name}
             for name, node in defs.items()}
    parts = {}
    for name in sorted(set(defs) & api):
        seen, todo = [name], sorted(calls[name] - api)
        while todo:
            helper = todo.pop(0)
            if helper not in seen:
                seen.append(helper)
                todo += sorted(calls[helper] - api - set(seen))
        parts[name] = "\n\n".join(ast.get_source_segment(code, defs[n]) or "" for n in seen)
    return parts


def rarity(fingerprints: list, corpus: set, weight: float) -> dict:
    """Each fingerprint's weight (see the module's docstring) over a list of copydetect fingerprints."""
    counts = defaultdict(int)
    for fp in fingerprints:
        for value in fp.hashes:
            counts[value] += 1
    return {v: min(1.0, 4 / (n + 2)) * (weight if v in corpus else 1.0) for v, n in counts.items()}


def rare_tokens(fp, matched: set, weights: dict) -> float:
    """The tokenised characters of ``fp`` covered by ``matched``, each weighed by the mean weight of the
    fingerprints covering it."""
    import numpy as np

    n = len(fp.filtered_code)
    starts, values = [], []
    for v in matched:
        if v in fp.hash_idx:
            starts += list(fp.hash_idx[v])
            values += [weights.get(v, 1.0)] * len(fp.hash_idx[v])
    if not starts:
        return 0.0
    starts, values = np.asarray(starts, dtype=np.int64), np.asarray(values)
    ends = np.minimum(starts + fp.k, n)
    total, count = np.zeros(n + 1), np.zeros(n + 1)
    np.add.at(total, starts, values)
    np.add.at(total, ends, -values)
    np.add.at(count, starts, 1)
    np.add.at(count, ends, -1)
    total, count = np.cumsum(total[:n]), np.cumsum(count[:n])
    return float((total[count > 0.5] / count[count > 0.5]).sum())


def evidence(fa, fb, weights: dict) -> tuple[float, list, float]:
    """Two fingerprints' score (the mean share of each covered by the other, times the rarity factor), the shares,
    and the rare tokens matched (:func:`rare_tokens`, at most :data:`RARE_TOKENS`)."""
    matched = fa.hashes & fb.hashes
    if not matched:
        return 0.0, [0.0, 0.0], 0
    shares, tokens, rare = [], 0, 0.0
    for fp in (fa, fb):
        mask, whole = covered(fp, matched), covered(fp, fp.hashes)
        tokens = max(tokens, int(mask.sum()))
        shares.append(min(1.0, float(mask.sum()) / max(1, int(whole.sum()))))
    if tokens * min(weights.get(v, 1.0) for v in matched) >= RARE_TOKENS:
        rare = RARE_TOKENS
    else:
        rare = max(rare_tokens(fa, matched, weights), rare_tokens(fb, matched, weights))
    return sum(shares) / 2 * min(1.0, rare / RARE_TOKENS), shares, min(rare, RARE_TOKENS)


def fingerprint_parts(handins: list, api: frozenset, master: str, boilerplate, limit: int) -> tuple[dict, dict]:
    """Each hand-in's parts fingerprinted (``h.parts``: name -> (text, fingerprint)), the fingerprints in more than
    ``limit`` hand-ins' same part left out (common code); and per part the weights of its fingerprints. Hand-ins
    whose part is the same text share one fingerprint object (what is left out of it is the same for all)."""
    master_parts = split_parts(master, api) if master else {}
    by_part, made = defaultdict(list), {}
    for h in handins:
        h.parts = {}
        for name, text in split_parts(h.code, api).items():
            if (name, text) not in made:  # a part many hold word for word (the master's answer): fingerprinted once
                made[name, text] = fingerprint(f"{h.student}.{name}", text, boilerplate)
            fp = made[name, text]
            if fp.hashes:
                h.parts[name] = (text, fp)
                by_part[name].append(fp)
    weights = {}
    for name, fps in sorted(by_part.items()):
        counts = defaultdict(int)
        for fp in fps:
            for v in fp.hashes:
                counts[v] += 1
        common = {v for v, n in counts.items() if n > limit}
        for fp in fps:
            if fp.hashes & common:
                fp.hashes = fp.hashes - common
        corpus = fingerprint("master", master_parts[name], boilerplate).hashes if name in master_parts else set()
        weights[name] = rarity(fps, corpus, CORPUS_WEIGHT)
    return by_part, weights


def part_pairs(handins: list, weights: dict) -> dict:
    """(i, j) -> the parts the pair shares, best first: dicts ``{"part", "score", "shares"}`` of those scoring at
    least :data:`PART_SHOWN` (at most :data:`SHOWN_PARTS`), for every pair sharing a fingerprint of a part."""
    index = defaultdict(list)
    for i, h in enumerate(handins):
        for name, (_, fp) in sorted(h.parts.items()):
            for v in fp.hashes:
                index[name, v].append(i)
    candidates = defaultdict(set)
    for (name, _), holders in index.items():
        for x in range(len(holders)):
            for y in range(x + 1, len(holders)):
                candidates[holders[x], holders[y]].add(name)
    out = {}
    for (i, j), names in sorted(candidates.items()):
        found, same, rare = [], [], 0.0
        for name in sorted(names):
            score, shares, tokens = evidence(handins[i].parts[name][1], handins[j].parts[name][1], weights[name])
            if min(shares) >= SAME_PART:  # several short parts the same: together, as one
                same.append(name)
                rare += tokens
            if score >= PART_SHOWN:
                found.append({"part": name, "score": round(score, 4), "shares": [round(s, 4) for s in shares]})
        if len(same) > 1:
            score = round(min(1.0, rare / RARE_TOKENS) * SAME_PART, 4)
            if score >= PART_SHOWN:
                found.append({"part": " + ".join(same), "score": score, "shares": [SAME_PART, SAME_PART],
                              "of": same})
        if found:
            found.sort(key=lambda p: (-p["score"], p["part"]))
            out[i, j] = found[:SHOWN_PARTS]
    return out
