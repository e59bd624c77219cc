"""copydetect's fingerprints of a hand-in's normalised code, and what two of them share: the k-grams hashed the same
in every process, the code common to much of the class left out, the pairs worth comparing, and each character's
weight (the master's own code counts little). :mod:`.report` compares whole hand-ins with them, :mod:`.parts` parts.
"""

from __future__ import annotations

import hashlib
import io
import itertools
from collections import defaultdict

from .read import filtered

#: copydetect's settings, as MOSS uses them: a match must span at least NOISE characters of the tokenised code
#: (identifiers count one character each), and any match of GUARANTEE characters is found.
NOISE, GUARANTEE = 20, 28


#: A fingerprint in more hand-ins than max(COMMON_MIN, COMMON_SHARE * n) is common code, not evidence.
COMMON_MIN, COMMON_SHARE = 10, 0.1


#: How much code that the master's answers also hold counts in a pair's score, against 1 for the rest: the code
#: independent correct answers naturally share is little evidence, even in a class too small for COMMON_MIN.
CORPUS_WEIGHT = 0.25


def stable_kgram_hashes(string: str, k: int):
    """copydetect's ``hashed_kgrams`` with a hash that is the same in every process and on every machine (BLAKE2b,
    64 bits): copydetect's own uses Python's ``hash``, randomised per process, so two runs chose different
    fingerprints and scores moved by about 0.05."""
    import numpy as np

    data = string.encode("utf-32-le")  # four bytes a character: a k-gram is a fixed slice
    width = 4 * k
    return np.array([int.from_bytes(hashlib.blake2b(data[i:i + width], digest_size=8).digest(), "little", signed=True)
                     for i in range(0, len(data) - width + 4, 4)], dtype=np.int64)


def fingerprint(name: str, code: str, boilerplate):
    """copydetect's fingerprint of normalised code, tokenised by :func:`.normal.filtered` (Pygments where
    that cannot read it) and hashed by :func:`stable_kgram_hashes`."""
    import copydetect.utils
    from copydetect import CodeFingerprint

    copydetect.utils.hashed_kgrams = stable_kgram_hashes  # read at call time by get_document_fingerprints
    tokens = filtered(code)
    if tokens is None:
        return CodeFingerprint(f"{name}.py", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate,
                               language="python", fp=io.StringIO(code))
    fp = CodeFingerprint(f"{name}.py", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate, filter=False,
                         fp=io.StringIO(tokens[0]))
    fp.raw_code, fp.offsets = code, tokens[1]
    return fp


def drop_common(handins: list, common: int | None = None) -> int:
    """Leave out of every fingerprint the hashes found in more hand-ins than the common-code limit (``common``, or
    by default max(COMMON_MIN, COMMON_SHARE * n)); returns it."""
    from copydetect.utils import get_token_coverage

    limit = max(COMMON_MIN, int(COMMON_SHARE * len(handins))) if common is None else common
    counts = defaultdict(int)
    for h in handins:
        for value in h.fingerprint.hashes:
            counts[value] += 1
    common = {value for value, n in counts.items() if n > limit}
    for h in handins:
        fp = h.fingerprint
        if fp.hashes & common:
            fp.hashes = fp.hashes - common
            fp.hash_idx = {v: i for v, i in fp.hash_idx.items() if v not in common}
            fp.token_coverage = get_token_coverage(fp.hash_idx, fp.k, len(fp.filtered_code)) if fp.hash_idx else 0
    return limit


def candidate_pairs(handins: list) -> set[tuple[int, int]]:
    """Pairs (i < j) that share at least one fingerprint, found through an index from fingerprint to hand-ins."""
    index = defaultdict(list)
    for i, h in enumerate(handins):
        for value in h.fingerprint.hashes:
            index[value].append(i)
    pairs = set()
    for holders in index.values():
        pairs.update(itertools.combinations(holders, 2))
    return pairs


def covered(fp, values):
    """Which characters of a fingerprint's tokenised code the k-grams of ``values`` (hashes of it) cover."""
    import numpy as np

    n = len(fp.filtered_code)
    starts = [np.asarray(fp.hash_idx[v], dtype=np.int64) for v in values if v in fp.hash_idx]
    diff = np.zeros(n + 1, dtype=np.int64)
    if starts:
        starts = np.concatenate(starts)
        np.add.at(diff, starts, 1)
        np.add.at(diff, np.minimum(starts + fp.k, n), -1)
    return np.cumsum(diff[:n]) > 0


def weigh(h, corpus: set) -> None:
    """A hand-in's weight per tokenised character: :data:`CORPUS_WEIGHT` where its code is also the master's (what
    independent correct answers naturally share), 1 elsewhere; and its covered characters."""
    import numpy as np

    fp = h.fingerprint
    h.weights = np.where(covered(fp, fp.hashes & corpus), CORPUS_WEIGHT, 1.0)
    h.total = float(h.weights[covered(fp, fp.hashes)].sum())
