"""Small, seeded data generators shared by the notebooks and their tests."""

from __future__ import annotations

import numpy as np


def projection_params(rng: np.random.Generator, d_in: int, d_k: int, d_v: int, *,
                      bias: bool = True, convention: str = "row") -> dict:
    """Random query/key/value projection parameters, drawn in a fixed order.

    Row convention (``X[L, D] @ W + b``): ``W_q, W_k`` are ``[d_in, d_k]``,
    ``W_v`` is ``[d_in, d_v]``, biases are vectors. Column convention
    (``Omega @ X[D, N] + beta``, the Understanding Deep Learning book):
    ``W`` matrices are transposed, ``[d_k, d_in]``, and biases are columns
    ``[d, 1]``. Draw order: W_q, W_k, W_v, b_q, b_k, b_v. Without ``bias`` the
    biases are zeros (and no random numbers are drawn for them).
    """
    if convention not in ("row", "column"):
        raise ValueError("convention must be 'row' or 'column'")
    shapes = {"W_q": (d_in, d_k), "W_k": (d_in, d_k), "W_v": (d_in, d_v)}
    params = {}
    for name, (a, b) in shapes.items():
        params[name] = rng.normal(size=(a, b) if convention == "row" else (b, a))
    for name, d in (("b_q", d_k), ("b_k", d_k), ("b_v", d_v)):
        shape = (d,) if convention == "row" else (d, 1)
        params[name] = rng.normal(size=shape) if bias else np.zeros(shape)
    return params


def toy_sentence(d_model: int = 8, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Tokens of a short sentence and an embedding ``X[L, d_model]`` for them.

    Every distinct word gets its own unit-length embedding, orthogonal to the
    others' (a random rotation of the standard basis), so a repeated word has
    the same embedding every time it occurs and different words have dot
    product 0. ``d_model`` must be at least the number of distinct words (8).
    """
    tokens = "the cat sat on the mat because the mat was warm".split()
    vocab = list(dict.fromkeys(tokens))
    if d_model < len(vocab):
        raise ValueError(f"d_model must be at least {len(vocab)}, the number of distinct words")
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(d_model, d_model)))
    table = {word: basis[:, i] for i, word in enumerate(vocab)}
    return tokens, np.stack([table[w] for w in tokens])


def toy_msa(seed: int = 0) -> tuple[list[str], "np.ndarray"]:
    """A small multiple sequence alignment and its one-hot encoding ``[S, L, A]``.

    Eight sequences of length 12 over the alphabet ``ACDEFGHIKL`` (A = 10):
    columns 0, 4 and 8 are conserved (the same residue in every sequence),
    and the sequences form two families (0-3 and 4-7) that share most
    residues within a family and differ between families. Returns the
    sequences as strings and the one-hot array (float64).
    """
    alphabet = "ACDEFGHIKL"
    rng = np.random.default_rng(seed)
    length, per_family = 12, 4
    conserved = {0: "C", 4: "G", 8: "K"}
    seqs = []
    for _ in range(2):
        ancestor = rng.choice(list(alphabet), size=length)
        for _ in range(per_family):
            seq = ancestor.copy()
            for i in rng.choice(length, size=2, replace=False):  # two mutations per member
                seq[i] = rng.choice(list(alphabet))
            for i, residue in conserved.items():
                seq[i] = residue
            seqs.append("".join(seq))
    onehot = np.zeros((len(seqs), length, len(alphabet)))
    for s, seq in enumerate(seqs):
        for i, residue in enumerate(seq):
            onehot[s, i, alphabet.index(residue)] = 1.0
    return seqs, onehot
