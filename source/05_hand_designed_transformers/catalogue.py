"""Synthetic submissions for 05_hand_designed_transformers.

Mistakes in the PyTorch twin and in the hand designs, and, for every task, several different valid
designs (other d_qk, other geometry, other positional tables) that must all earn full points.
"""

from tools.submissions import Submission

CLS_LINE = "CLS = np.array([0.0, 0.0, 0.0, 1.0])\n"

#: The constructor every alternative's TorchTransformer shares (the layers the tests load designs into).
TORCH_INIT = '''
class TorchTransformer(nn.Module):
    def __init__(self, input_dim, qk_dim, v_dim, pos_dim=None, max_len=10):
        super().__init__()
        self.qk_dim = qk_dim
        self.pos = nn.Embedding(max_len, pos_dim) if pos_dim is not None else None
        total = input_dim + (pos_dim or 0)
        self.Km = nn.Linear(total, qk_dim, bias=False)
        self.Qm = nn.Linear(total, qk_dim, bias=False)
        self.Vm = nn.Linear(total, v_dim, bias=False)
'''

#: The complete answers in the two other numeric styles every catalogue carries (issue 25): the submission
#: written in float32 PyTorch and the one in float64 NumPy ("reference": the master's own solution), each
#: earning every point. Where a style cannot apply: TorchTransformer is PyTorch in every style (load_design fills its nn.Linear layers).
PRECISIONS = {"float32 PyTorch": "alt-torch-float32", "float64 NumPy": "reference"}

SUBMISSIONS = [
    # ---- Part 1: the PyTorch twin ----------------------------------------------------------
    Submission(
        "positions-added", "added the positional table to the tokens instead of concatenating it",
        edits=[("torch_transformer", "seq = torch.cat([seq, self.pos.weight[: seq.shape[0]]], dim=-1)",
                "seq = seq + self.pos.weight[: seq.shape[0], : seq.shape[1]]")],
        says='must match the size of tensor b',
        loses=frozenset({"test_torch_equivalence"}), in_demo=True,
    ),
    Submission(
        "torch-softmax-no-max", "wrote the softmax as exp / sum exp, without subtracting each row's maximum",
        edits=[("torch_transformer", "weights = torch.softmax(Q @ K.T / math.sqrt(self.qk_dim), dim=-1)",
                "S = Q @ K.T / math.sqrt(self.qk_dim)\n        weights = S.exp() / S.exp().sum(dim=-1, keepdim=True)")],
        says="Look for an overflowing exp()",
        loses=frozenset({"test_torch_equivalence"}),
    ),
    Submission(
        "projections-with-bias", "gave Km, Qm and Vm biases",
        edits=[("torch_transformer", "self.Km = nn.Linear(total, qk_dim, bias=False)\n        self.Qm = nn.Linear(total, qk_dim, bias=False)\n"
                "        self.Vm = nn.Linear(total, v_dim, bias=False)",
                "self.Km = nn.Linear(total, qk_dim)\n        self.Qm = nn.Linear(total, qk_dim)\n        self.Vm = nn.Linear(total, v_dim)")],
        says="has a bias",
        loses=frozenset({"test_torch_structure", "test_torch_equivalence"}),
    ),
    Submission(
        "scale-by-d_v", "scaled the scores by sqrt(d_v)",
        edits=[("torch_transformer", "math.sqrt(self.qk_dim)", "math.sqrt(V.shape[-1])")],
        says="common mistake: the scores are scaled by sqrt(3), which is sqrt(d_v) (and sqrt(input_dim)) here",
        loses=frozenset({"test_torch_equivalence"}), in_demo=True,
    ),
    Submission(
        "softmax-over-queries", "took the softmax over the queries (dim=0)",
        edits=[("torch_transformer", "/ math.sqrt(self.qk_dim), dim=-1)", "/ math.sqrt(self.qk_dim), dim=0)")],
        says="common mistake: the softmax is taken over the queries instead of the keys",
        headline="the softmax is taken over the queries instead of the keys",
        loses=frozenset({"test_torch_equivalence"}),
    ),
    Submission(
        "weights-transposed", "weighted the values with the transposed attention matrix",
        edits=[("torch_transformer", "return weights @ V", "return weights.T @ V")],
        says='common mistake: the weights are transposed',
        loses=frozenset({"test_torch_equivalence"}),
    ),
    # Issue 60: a scale read from the example's global or from the wrong size, a twin that is not differentiable.
    Submission(
        "twin-scale-from-example", "scaled by sqrt of the example's d_qk (the global Km_r.shape[1], 2) instead of qk_dim",
        edits=[("torch_transformer", "math.sqrt(self.qk_dim)", "math.sqrt(Km_r.shape[1])")],
        says="your code reads the notebook's variable Km_r",  # at autograde the notebook's variables are hidden
        headline="the qk_dim of the example above (a fixed 2)",
        loses=frozenset({"test_torch_equivalence", "test_torch_structure"}),
    ),
    Submission(
        "twin-scale-by-length", "confused the two sizes: scaled by sqrt(L), the number of tokens, instead of sqrt(d_qk)",
        edits=[("torch_transformer", "math.sqrt(self.qk_dim)", "math.sqrt(len(seq))")],
        says="the scores are scaled by sqrt(L) = sqrt(4), the number of tokens",
        headline="the number of tokens",
        loses=frozenset({"test_torch_equivalence"}),
    ),
    Submission(
        "twin-scale-by-input-width", "scaled by sqrt of the input's width (token and position features) instead of d_qk",
        edits=[("torch_transformer", "math.sqrt(self.qk_dim)", "math.sqrt(seq.shape[-1])")],
        says="the width of the token with its position (input_dim + pos_dim)",
        headline="the width of the token with its position (input_dim + pos_dim)",
        loses=frozenset({"test_torch_equivalence"}),
    ),
    Submission(
        "twin-wraps-reference", "wrapped the NumPy reference_transformer in forward: right outputs, but nothing to train",
        replace={"torch_transformer": TORCH_INIT + '''
    def forward(self, seq):
        pos = None if self.pos is None else self.pos.weight.detach()
        out, _ = reference_transformer(seq.detach(), self.Km.weight.detach().T, self.Qm.weight.detach().T,
                                       self.Vm.weight.detach().T, pos)
        return torch.tensor(out, dtype=torch.float32)
'''},
        says="no gradient of the output reaches the input sequence",
        headline="no gradient of the output reaches the input sequence",
        loses=frozenset({"test_torch_equivalence"}),
    ),
    # ---- Parts 2, 3, 5: hand designs --------------------------------------------------------
    Submission(
        "identity-not-sharp", "chose Km = Qm = I: the right pattern, but logits too soft for the tolerance",
        edits=[("design_identity", "Km_id = np.eye(3) * 5.0\nQm_id = np.eye(3) * 5.0", "Km_id = np.eye(3)\nQm_id = np.eye(3)")],
        says="differ beyond the tolerance",
        headline="Are the scores sharp enough?",
        loses=frozenset({"test_design_identity"}), in_demo=True,
    ),
    Submission(
        "identity-tuned-on-example", "made the logits just sharp enough for the example [A, B, C, C]: a lone token among "
        "five others (length 6) falls outside the tolerance",
        edits=[("design_identity", "Km_id = np.eye(3) * 5.0\nQm_id = np.eye(3) * 5.0", "Km_id = np.eye(3) * 2.75\nQm_id = np.eye(3) * 2.75")],
        says="not only those of the example",
        headline="not only those of the example",
        loses=frozenset({"test_design_identity"}),
    ),
    Submission(
        "first-not-sharp", "made position 0's key only slightly larger than the others",
        edits=[("design_first", "Km_first[3, 0] = 10.0", "Km_first[3, 0] = 2.0")],
        says="differ beyond the tolerance",
        headline="position 0 more weight than any later position",
        loses=frozenset({"test_design_first"}),
    ),
    Submission(
        "first-values-carry-position", "let the values carry the positional features as well as the token",
        edits=[("design_first", "Vm_first = np.zeros((7, 3))", "Vm_first = np.full((7, 3), 0.2)")],
        says="differ beyond the tolerance",
        loses=frozenset({"test_design_first"}),
    ),
    Submission(
        "unique-attends-to-itself", "let each token attend to itself, so every token looks repeated",
        edits=[("design_unique", "Qm_unique[4:, 4:] = -np.eye(5) * 10.0", "Qm_unique[4:, 4:] = 0.0")],
        says="Does a query avoid its own position",
        headline="Does a query avoid its own position",
        loses=frozenset({"test_design_unique"}),
    ),
    # ---- Alternative correct answers -------------------------------------------------------
    Submission(
        "alt-designs-circle", "identity with d_qk = 2 (keys on a circle), copy-first with d_pos = 1, unique with larger logits",
        replace={
            "design_identity": '''
angles = np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3])
Km_id = 8.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)  # [3, 2]
Qm_id = Km_id.copy()
Vm_id = np.eye(3)
''',
            "design_first": '''
pos_first = np.array([[1.0], [0.0], [0.0], [0.0]])  # d_pos = 1: "am I first?"
Km_first = np.array([[0.0], [0.0], [0.0], [12.0]])
Qm_first = np.array([[1.0], [1.0], [1.0], [0.0]])    # every token asks the same question
Vm_first = np.vstack([np.eye(3), np.zeros((1, 3))])
''',
            "design_unique": CLS_LINE + '''
pos_unique = np.eye(5)
Km_unique = np.zeros((9, 9))
Qm_unique = np.zeros((9, 9))
Km_unique[:3, :3] = np.eye(3) * 20.0
Qm_unique[:3, :3] = np.eye(3) * 20.0
Km_unique[3, 3] = 10.0
Qm_unique[:3, 3] = 20.0
Km_unique[4:, 4:] = np.eye(5) * 20.0
Qm_unique[4:, 4:] = -np.eye(5) * 20.0
Vm_unique = np.zeros((9, 1))
Vm_unique[:3, 0] = -0.5
Vm_unique[3, 0] = 0.5
''',
        },
        in_demo=True,
    ),
    Submission(
        "alt-designs-rotated", "designs in a rotated, wider query/key space (d_qk = 4 and 12) and an einsum twin",
        replace={
            "torch_transformer": TORCH_INIT + '''
    def forward(self, seq):
        if self.pos is not None:
            seq = torch.cat((seq, self.pos(torch.arange(seq.shape[0]))), dim=1)
        k, q, v = self.Km(seq), self.Qm(seq), self.Vm(seq)
        a = torch.einsum("id,jd->ij", q, k).mul(self.qk_dim ** -0.5).softmax(dim=1)
        return torch.einsum("ij,jv->iv", a, v)
''',
            "design_identity": '''
R = np.linalg.qr(np.random.default_rng(7).normal(size=(4, 4)))[0][:3]  # 3 orthonormal rows in 4-d
Km_id = 7.0 * R
Qm_id = 7.0 * R
Vm_id = np.eye(3)
''',
            "design_first": '''
pos_first = np.array([[0.0], [1.0], [1.0], [1.0]])   # "am I *not* first?"
Km_first = np.zeros((4, 2))
Km_first[3, 0] = -15.0                                # later positions: very negative keys
Qm_first = np.zeros((4, 2))
Qm_first[:3, 0] = 1.0
Vm_first = np.vstack([np.eye(3), np.zeros((1, 3))])
''',
            "design_unique": CLS_LINE + '''
pos_unique = np.eye(5)
P = np.zeros((9, 12))
P[:, :9] = np.eye(9)                                  # pad the query/key space to d_qk = 12
Km_unique = np.zeros((9, 9))
Qm_unique = np.zeros((9, 9))
Km_unique[:3, :3] = np.eye(3) * 12.0
Qm_unique[:3, :3] = np.eye(3) * 12.0
Km_unique[3, 3] = 6.0
Qm_unique[:3, 3] = 12.0
Km_unique[4:, 4:] = np.eye(5) * 12.0
Qm_unique[4:, 4:] = -np.eye(5) * 12.0
Km_unique, Qm_unique = Km_unique @ P[:9], Qm_unique @ P[:9]
Vm_unique = np.zeros((9, 1))
Vm_unique[:3, 0] = -2.0
Vm_unique[3, 0] = 2.0
''',
        },
    ),
    Submission(
        "alt-designs-permuted", "designs with permuted query/key coordinates and a two-feature positional code",
        replace={
            "design_identity": '''
P = np.eye(3)[[2, 0, 1]]
Km_id = 6.0 * P
Qm_id = 6.0 * P
Vm_id = np.eye(3)
''',
            "design_first": '''
pos_first = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
Km_first = np.zeros((5, 1))
Km_first[3, 0] = 6.0
Km_first[4, 0] = -6.0
Qm_first = np.zeros((5, 1))
Qm_first[:3, 0] = 1.0
Vm_first = np.vstack([np.eye(3), np.zeros((2, 3))])
''',
            "design_unique": CLS_LINE + '''
order = [8, 7, 6, 5, 4, 3, 2, 1, 0]                    # the same design, coordinates reversed
pos_unique = np.eye(5)
K = np.zeros((9, 9))
Qd = np.zeros((9, 9))
K[:3, :3] = np.eye(3) * 10.0
Qd[:3, :3] = np.eye(3) * 10.0
K[3, 3] = 5.0
Qd[:3, 3] = 10.0
K[4:, 4:] = np.eye(5) * 10.0
Qd[4:, 4:] = -np.eye(5) * 10.0
Km_unique, Qm_unique = K[:, order], Qd[:, order]
Vm_unique = np.zeros((9, 1))
Vm_unique[:3, 0] = -1.0
Vm_unique[3, 0] = 1.0
''',
        },
    ),
    Submission(
        "alt-torch-float32", "the three designs as float32 PyTorch tensors, the module computing in float64",
        replace={
            "design_identity": '''
Km_id = torch.eye(3) * 5.0
Qm_id = torch.eye(3) * 5.0
Vm_id = torch.eye(3)
''',
            "design_first": '''
pos_first = torch.eye(4)
Km_first = torch.zeros(7, 1)
Km_first[3, 0] = 10.0
Qm_first = torch.zeros(7, 1)
Qm_first[3:, 0] = 1.0
Vm_first = torch.cat([torch.eye(3), torch.zeros(4, 3)])
''',
            "design_unique": '''
CLS = np.array([0.0, 0.0, 0.0, 1.0])
pos_unique = torch.eye(5)
Km_unique, Qm_unique = torch.zeros(9, 9), torch.zeros(9, 9)
Km_unique[:3, :3] = torch.eye(3) * 10.0
Qm_unique[:3, :3] = torch.eye(3) * 10.0
Km_unique[3, 3] = 5.0
Qm_unique[:3, 3] = 10.0
Km_unique[4:, 4:] = torch.eye(5) * 10.0
Qm_unique[4:, 4:] = -torch.eye(5) * 10.0
Vm_unique = torch.zeros(9, 1)
Vm_unique[:3, 0] = -1.0
Vm_unique[3, 0] = 1.0
''',
            "torch_transformer": TORCH_INIT + '''
    def forward(self, seq):
        seq = seq.double()
        if self.pos is not None:
            seq = torch.cat([seq, self.pos.weight[: seq.shape[0]].double()], dim=-1)
        K, Q, V = (seq @ layer.weight.double().T for layer in (self.Km, self.Qm, self.Vm))
        return torch.softmax(Q @ K.T / self.qk_dim ** 0.5, dim=-1) @ V
''',
        },
    ),
    Submission(
        "alt-own-style", "every answer written independently, in a style of its own (a +/- identity, the position as a "
        "number, unique tokens by averaging over CLS and the other copies): an independent author, whom the "
        "similarity report must not flag against the master",
        replace={
            "torch_transformer": '''
class TorchTransformer(nn.Module):
    def __init__(self, input_dim, qk_dim, v_dim, pos_dim=None, max_len=10):
        super().__init__()
        self.qk_dim = qk_dim
        self.pos = None if pos_dim is None else nn.Embedding(max_len, pos_dim)
        width = input_dim if pos_dim is None else input_dim + pos_dim
        self.Qm, self.Km = (nn.Linear(width, qk_dim, bias=False) for _ in "qk")
        self.Vm = nn.Linear(width, v_dim, bias=False)

    def forward(self, seq):
        parts = [seq]
        if self.pos is not None:
            parts.append(self.pos.weight[:len(seq)])
        x = torch.hstack(parts)
        scores = torch.matmul(self.Qm(x), self.Km(x).T) * self.qk_dim ** -0.5
        return F.softmax(scores, dim=1) @ self.Vm(x)
''',
            "design_identity": '''
signs = 2.0 * np.eye(3) - 1.0    # +1 on a token's own feature, -1 on the others
Km_id = 4.0 * signs
Qm_id = 4.0 * signs
Vm_id = np.eye(3)
''',
            "design_first": '''
pos_first = np.arange(4.0).reshape(4, 1)                  # d_pos = 1: the position itself
Km_first = np.concatenate([np.zeros((3, 1)), [[-15.0]]])  # a key falls as its position grows
Qm_first = np.concatenate([np.ones((3, 1)), [[0.0]]])     # every token asks the same
Vm_first = np.concatenate([np.eye(3), np.zeros((1, 3))])
''',
            "design_unique": CLS_LINE + '''
pos_unique = np.eye(5)
asks = 10.0 * np.eye(4)
asks[:3, 3] = 10.0  # a token's query matches CLS as strongly as another copy of itself
Km_unique = np.block([[10.0 * np.eye(4), np.zeros((4, 5))], [np.zeros((5, 4)), 10.0 * np.eye(5)]])
Qm_unique = np.block([[asks, np.zeros((4, 5))], [np.zeros((5, 4)), -10.0 * np.eye(5)]])  # never its own position
# The mean over CLS and the other copies: +1 alone, (1 - 3 n) / (1 + n) <= -1 with n other copies.
Vm_unique = np.array([[-3.0], [-3.0], [-3.0], [1.0], [0.0], [0.0], [0.0], [0.0], [0.0]])
''',
        },
    ),
]
