"""Hostile submissions: each one is a wrong answer plus an attack on the grader.

Most attack 01_self_attention; a few attack the assignment where their seam bites (02, 05).
Every entry names the class of attack it belongs to (``kind``) and the catalogue mistake it is
built on (``base``, a mistake of the attack's own assignment). The tests grade them in one real autograde
run next to every catalogue student and require each to score, cell by cell, no more than its base mistake
scores without the attack (exactly as much where ``exact``), leak nothing, and leave every other student's
grades, ``source/`` and the other submissions unchanged.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from attention_course.grading.course import catalogue_path
from tools.submissions import Submission, load_catalogue

ASSIGNMENT = "01_self_attention"
NOTEBOOK = "self_attention.ipynb"
NOTEBOOKS = {"01_self_attention": NOTEBOOK, "02_multihead_attention": "multihead_attention.ipynb",
             "05_hand_designed_transformers": "hand_designed_transformers.ipynb"}
BASES = {a: {s.name: s for s in load_catalogue(catalogue_path(a))} for a in NOTEBOOKS}
BASE = BASES[ASSIGNMENT]
#: printed by attacks that try to leak (their source spells it as two halves, so only output shows it whole)
LEAK = "LEAKED>>"
SAY_LEAK = '"LEAK" + "ED>>"'


@dataclass
class Attack:
    name: str
    kind: str
    description: str
    base: str  # a catalogue mistake, or "complete" for attacks on a correct answer (malformed input)
    code: str = ""  # a student cell inserted after the setup cell
    transform: object = None  # notebooks -> notebooks, after the cell is inserted
    files: dict = None
    replace: dict = None  # solution cells replaced on top of the base mistake
    exact: bool = True  # scores equal the base's (otherwise: no cell scores more)
    needs: str = ""  # a sandbox feature the attack must not be run without ("signals")
    assignment: str = ASSIGNMENT
    finding: str = ""  # the seam it probes (a finding of the hostile reviews), for the record

    @property
    def base_submission(self) -> Submission:
        return BASES[self.assignment][self.base]

    def submission(self) -> Submission:
        base = BASES[self.assignment].get(self.base)
        mine = dict(self.replace or {})  # cells the attack writes itself replace the base's edits of them
        edits = [e for e in base.edits if e[0] not in mine] if base else []
        replace = {**(base.replace if base else {}), **mine}
        notebook = NOTEBOOKS[self.assignment]

        def transform(notebooks):
            notebooks = copy.deepcopy(notebooks)
            if self.code:
                insert_after(notebooks[notebook], "setup", self.code)
            return self.transform(notebooks) if self.transform else notebooks

        return Submission(self.name, self.description, edits=edits, replace=replace,
                          transform=transform, files=dict(self.files or {}))


def insert_after(nb: dict, grade_id: str, source: str) -> None:
    at = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
    nb["cells"].insert(at + 1, {"cell_type": "code", "metadata": {}, "source": source.strip("\n"),
                                "outputs": [], "execution_count": None})


def grade_cells(nb: dict):
    return [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade") and c["cell_type"] == "code"]


def on_notebook(fn):
    def transform(notebooks):
        fn(notebooks[NOTEBOOK])
        return notebooks
    return transform


def _tag_skip(nb):
    for cell in grade_cells(nb):
        cell["metadata"]["tags"] = ["skip-execution", "raises-exception"]


def _points(nb):
    for cell in grade_cells(nb):
        md = cell["metadata"]["nbgrader"]
        if md["grade_id"] in BASE["unscaled-scores"].loses:
            md.update(grade=False, points=0)  # hide the failing tests ...
        else:
            md["points"] = 1000  # ... and inflate the passing ones


def _rename_ids(nb):
    for cell in grade_cells(nb):
        cell["metadata"]["nbgrader"]["grade_id"] += "_renamed"


def _fake_cells(nb):
    for cell in list(grade_cells(nb)):
        fake = {"cell_type": "code", "source": "pass", "outputs": [], "execution_count": None,
                "metadata": {"nbgrader": dict(cell["metadata"]["nbgrader"], locked=False, solution=True)}}
        nb["cells"].insert(nb["cells"].index(cell), fake)


def _delete_tests(nb):
    nb["cells"] = [c for c in nb["cells"] if c not in grade_cells(nb)]


def _blank_tests(nb):
    for cell in grade_cells(nb):
        cell["source"] = '"""(emptied)"""\npass'


def _tests_after_exit(nb):
    tests = grade_cells(nb)
    nb["cells"] = [c for c in nb["cells"] if c not in tests]
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "import os\nos._exit(0)",
                        "outputs": [], "execution_count": None})
    nb["cells"].extend(tests)


def _exfiltrate(notebooks):
    nb = notebooks[NOTEBOOK]
    insert_after(nb, "scaled_scores", EXFILTRATE)
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": f'print({SAY_LEAK}, SEEN)',
                        "outputs": [], "execution_count": None})
    return notebooks


def _corrupt(notebooks):
    return {NOTEBOOK: json.dumps(notebooks[NOTEBOOK])[: 5000]}  # cut off in the middle: not valid JSON


def _renamed(notebooks):
    return {"self_attention (1).ipynb": notebooks[NOTEBOOK]}


def _wrong_kernel(nb):
    nb["metadata"]["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    nb["metadata"]["language_info"] = {"name": "R"}


def _old_format(notebooks):
    import nbformat

    nb = nbformat.from_dict(notebooks[NOTEBOOK])
    return {NOTEBOOK: nbformat.writes(nbformat.convert(nb, 3), version=3)}


READ_DISK = f'''
import glob, os, sqlite3
found = []
here = os.getcwd()
candidates = ["gradebook.db", "../gradebook.db", "../../gradebook.db", "../../../gradebook.db",
              "../../../source/01_self_attention/self_attention.ipynb", "/etc/shadow"]
parts = here.split(os.sep)
for i in range(1, len(parts)):
    root = os.sep.join(parts[:i]) or os.sep
    candidates += [os.path.join(root, "gradebook.db"), os.path.join(root, "source", "01_self_attention", "self_attention.ipynb")]
candidates += glob.glob("/tmp/**/gradebook.db", recursive=True)[:20] + glob.glob("/work/**/gradebook.db", recursive=True)[:20]
for path in candidates:
    try:
        with open(path, "rb") as f:
            found.append(f.read())
    except OSError:
        pass
    try:
        rows = sqlite3.connect(f"file:{{path}}?mode=ro", uri=True).execute("select source from source_cell").fetchall()
        found.append(repr(rows).encode())
    except Exception:
        pass
print({SAY_LEAK}, b"".join(found)[:200000])
'''

READ_MEMORY = f'''
import os
loot = []
for pid in [os.getppid()] + [p for p in os.listdir("/proc") if p.isdigit()]:
    for what in ("environ", "mem", "cmdline", "maps"):
        try:
            with open(f"/proc/{{pid}}/{{what}}", "rb") as f:
                loot.append(f.read(4096))
        except OSError:
            pass
print({SAY_LEAK}, [x for x in loot if b"HIDDEN" in x or b"gradebook" in x][:5])
'''

SNOOP_FRAMES = '''
import gc, sys
import numpy as np

def self_attention(X, W_q, b_q, W_k, b_k, W_v, b_v):
    """Unscaled (wrong), unless a reference of the right shape can be found in the caller's memory."""
    L, dv = X.shape[0], W_v.shape[1]
    frame = sys._getframe(1)
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, np.ndarray) and value.shape == (L, L) and "ref" in name:
                return value @ (X @ W_v + b_v), value
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "A_ref_" in obj:
            A = obj["A_ref_"]
            return A @ (X @ W_v + b_v), A
    Q, K, V = X @ W_q + b_q, X @ W_k + b_k, X @ W_v + b_v
    S = Q @ K.T
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    A = E / E.sum(axis=-1, keepdims=True)
    return A @ V, A
'''

EXFILTRATE = '''
import numpy as np
SEEN = []
_original_scaled_scores = scaled_scores

def scaled_scores(Q, K):
    SEEN.append((np.asarray(Q).tolist(), np.asarray(K).tolist()))
    return _original_scaled_scores(Q, K)
'''

WRITE_OUTSIDE = '''
import glob, os, shutil
here = os.getcwd()
targets = glob.glob("../../../source/**/*.ipynb", recursive=True) + glob.glob("../../*/01_self_attention/*.ipynb")
parts = here.split(os.sep)
for i in range(1, len(parts)):
    root = os.sep.join(parts[:i]) or os.sep
    targets += glob.glob(os.path.join(root, "source", "*", "*.ipynb")) + glob.glob(os.path.join(root, "submitted", "*", "*", "*.ipynb"))
    targets += [os.path.join(root, "gradebook.db")]
for path in targets + ["/tmp/attention-canary.txt", os.path.expanduser("~/../../attention-canary.txt")]:
    try:
        with open(path, "w") as f:
            f.write("overwritten by a submission")
    except OSError:
        pass
    try:
        os.remove(path)
    except OSError:
        pass
for i in range(1, len(parts)):
    for d in glob.glob(os.path.join(os.sep.join(parts[:i]) or os.sep, "submitted", "*")):
        shutil.rmtree(d, ignore_errors=True)
with open("big.bin", "wb") as f:  # a file larger than the kernel may write
    try:
        for _ in range(1024):
            f.write(b"x" * 2**20)
    except OSError:
        pass
'''

PATCH_NUMPY = '''
import numpy as np
np.allclose = lambda *a, **k: True
np.isclose = lambda a, b, *x, **k: np.ones(np.broadcast(np.asarray(a), np.asarray(b)).shape, dtype=bool)
np.testing.assert_allclose = lambda *a, **k: None
np.abs = np.absolute = lambda x, *a, **k: np.zeros_like(np.asarray(x, dtype=float))
np.isfinite = lambda x, *a, **k: np.ones_like(np.asarray(x), dtype=bool)
'''

PATCH_TORCH = '''
import torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isfinite = lambda x: torch.ones_like(torch.as_tensor(x), dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
'''

PATCH_COURSE = '''
import attention_course, attention_course.checks as checks
for name in ("assert_close", "check_shape", "check_sums_to_one", "check_unchanged", "to_numpy"):
    setattr(checks, name, lambda *a, **k: None)
    setattr(attention_course, name, lambda *a, **k: None)
    globals()[name] = lambda *a, **k: None
'''

PATCH_BUILTINS = '''
import builtins
builtins.abs = lambda x: 0
builtins.all = lambda *a: True
builtins.any = lambda *a: False
builtins.float = lambda *a: 0.0
'''

LIAR = '''
class Anything:
    """Claims to equal everything."""
    shape = (5, 7)
    def __eq__(self, other): return True
    def __sub__(self, other): return 0.0
    def __abs__(self): return 0.0
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return False
    def __ge__(self, other): return False
    def __float__(self): return 0.0
    def __array__(self, *a, **k): raise TypeError("no")

def scaled_scores(Q, K):
    return Anything()
'''

INPUT_TRANSFORMER = '''
def _neuter(lines):
    text = "".join(lines)
    return ["pass\\n"] if ("assert" in text or "check_" in text) else lines
get_ipython().input_transformers_post.append(_neuter)
'''

AST_TRANSFORMER = '''
import ast

class _NoChecks(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()

    def visit_Expr(self, node):
        call = node.value
        if isinstance(call, ast.Call) and getattr(call.func, "id", "").startswith(("assert_", "check_")):
            return ast.Pass()
        return node

get_ipython().ast_transformers.append(_NoChecks())
'''

CUSTOM_EXC = '''
ip = get_ipython()
ip.set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)
ip.showtraceback = lambda *a, **k: None
import sys
sys.excepthook = lambda *a: None
'''

EVENTS = '''
import attention_course.checks as checks

def _before(*args):
    g = get_ipython().user_ns
    for name in ("assert_close", "check_shape", "check_sums_to_one", "check_unchanged"):
        g[name] = lambda *a, **k: None

def _after(result):
    result.error_in_exec = None
    result.error_before_exec = None

get_ipython().events.register("pre_run_cell", _before)
get_ipython().events.register("post_run_cell", _after)
'''

DETECT_GRADER = '''
import os
if os.environ.get("NBGRADER_EXECUTION") == "autograde" or "autograded" in os.getcwd() or not os.path.exists("/etc/hostname"):
    import numpy as np, attention_course.checks as checks
    np.allclose = lambda *a, **k: True
    for name in ("assert_close", "check_shape", "check_sums_to_one", "check_unchanged"):
        setattr(checks, name, lambda *a, **k: None)
        globals()[name] = lambda *a, **k: None
    get_ipython().input_transformers_post.append(lambda lines: ["pass\\n"] if "assert" in "".join(lines) else lines)
'''

REPLACE_AGENT = '''
import sys, types
import numpy as np
fake = types.ModuleType("attention_course.grading.judging.agent")
fake.serve = lambda: None
fake.connect = lambda path: None
sys.modules["attention_course.grading.judging.agent"] = fake
'''

KILL_GRADER = '''
import os, signal
for target in (os.getppid(), -os.getpgid(os.getppid()), 1):
    try:
        os.kill(target, signal.SIGKILL)
    except OSError:
        pass
'''

KILL_EVERYTHING = '''
import os, signal
os.kill(-1, signal.SIGKILL)
'''

ASK_FORK_SERVER = '''
import json, os, socket
# Ask any fork server whose socket this kernel inherited for an unconfined kernel that drops a canary.
line = "open('/tmp/attention-canary.txt', 'w').write('escaped')"
request = json.dumps({"args": [f"--IPKernelApp.exec_lines=[{line!r}]"], "config": "/dev/null", "cwd": "/tmp",
                      "env": {}, "stderr": "/dev/null"}).encode()
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    if s.type == socket.SOCK_SEQPACKET:
        try:
            s.send(request)
        except OSError:
            pass
    s.close()
'''

FORK_BOMB = '''
import os, time
children = 0
try:
    while children < 5000:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            time.sleep(900)
            os._exit(0)
        children += 1
except OSError as exc:
    print("fork refused after", children, "children:", exc)
'''


# -- seams between the pieces (a second round of hostile hand-ins) ------------------------------
FAKE_CHECKS = """
def assert_close(*args, **kwargs):
    pass

def check_shape(*args, **kwargs):
    pass

def check_sums_to_one(*args, **kwargs):
    pass

def check_unchanged(*args, **kwargs):
    pass
"""


def _cell(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source.strip("\\n"), "outputs": [], "execution_count": None}


def _find(nb: dict, grade_id: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def _move_to_end(grade_id: str, extra: str = ""):
    """Move a locked cell below everything (and add a cell of the student's own in front of the tests)."""
    def transform(notebooks):
        nb = next(iter(notebooks.values()))
        cell = _find(nb, grade_id)
        nb["cells"].remove(cell)
        if extra:
            nb["cells"].insert(0, _cell(extra))
        nb["cells"].append(cell)
        return notebooks
    return transform


def _shadow_locked(grade_id: str, source: str):
    """Give the locked cell's id to a cell of the student's own, placed first; the real one follows later."""
    def transform(notebooks):
        nb = next(iter(notebooks.values()))
        real = _find(nb, grade_id)
        fake = copy.deepcopy(real)
        fake["source"] = source.strip("\\n")
        nb["cells"].insert(0, fake)
        nb["cells"].remove(real)
        nb["cells"].append(real)
        return notebooks
    return transform


def _many_cells(source: str, count: int):
    def transform(notebooks):
        nb = next(iter(notebooks.values()))
        nb["cells"][1:1] = [_cell(source) if source else dict(_cell("x"), source="") for _ in range(count)]
        return notebooks
    return transform


def _cells_after(grade_id: str, *sources: str):
    """Student cells put right after the cell ``grade_id`` (a cell of the master, by its id)."""
    def transform(notebooks):
        nb = next(iter(notebooks.values()))
        at = nb["cells"].index(_find(nb, grade_id)) + 1
        nb["cells"][at:at] = [_cell(s) for s in sources]
        return notebooks
    return transform


def _cells_after_setup(*sources: str):
    return _cells_after("setup", *sources)


def _after_every_answer(source: str):
    """A student cell after every answer cell (as if each answer ended with ``source``)."""
    def transform(notebooks):
        for nb in notebooks.values():
            cells = []
            for cell in nb["cells"]:
                cells.append(cell)
                if cell["metadata"].get("nbgrader", {}).get("solution") and cell["cell_type"] == "code":
                    cells.append(_cell(source))
            nb["cells"] = cells
        return notebooks
    return transform


# -- the course's own files, shared memory, text on hidden inputs (issue 39) ------------------------------------
#: Looks for the master notebooks and the catalogues wherever a course could keep them (the working folder, every
#: folder above it and above the Python path, the usual homes of a course, a search of /tmp and /home) and runs
#: every solution cell of a master and every alternative answer of a catalogue it finds.
READ_SOURCE = """
import glob, json, os, sys, types
def _solutions(path):
    try:
        cells = json.load(open(path)).get("cells", [])
    except Exception:
        return []
    return ["".join(c.get("source", "")) for c in cells if "### BEGIN SOLUTION" in "".join(c.get("source", ""))]
def _alternatives(path):
    entries, fake = [], types.ModuleType("tools.submissions")
    fake.Submission = lambda name, description, **kw: entries.append(kw)
    fake.in_dtype = lambda sources, dtype: {k: v.replace("DTYPE", dtype) for k, v in sources.items()}
    sys.modules.setdefault("tools", types.ModuleType("tools"))
    sys.modules["tools.submissions"] = fake
    try:
        exec(compile(open(path).read(), path, "exec"), {"__name__": "catalogue"})
    except Exception:
        pass
    return [src for kw in entries if not kw.get("loses") for src in kw.get("replace", {}).values()]
roots = {"/", "/tmp", "/home", "/root", "/work", "/srv", "/opt"}
for start in [os.getcwd(), *sys.path]:
    while start not in ("", "/"):
        roots.add(start)
        start = os.path.dirname(start)
found = []
for root in sorted(roots):
    for pattern in ("catalogue.py", "*.ipynb", "*/catalogue.py", "source/*/*.ipynb", "source/*/catalogue.py",
                    "*/source/*/*.ipynb", "*/source/*/catalogue.py", "*/*/source/*/catalogue.py"):
        found += glob.glob(os.path.join(root, pattern))
for top in ("/tmp", "/home"):
    found += glob.glob(os.path.join(top, "**", "catalogue.py"), recursive=True)[:20]
cells = [c for path in sorted(set(found)) for c in (_solutions(path) if path.endswith(".ipynb") else _alternatives(path))]
for source in cells:
    try:
        exec(source, globals())
    except Exception:
        pass
print("found", len(set(found)), "files, ran", len(cells), "cells")
"""

#: A System V shared-memory segment of 64 MiB, left behind, holding a correct ``scaled_scores``; and the classmate
#: that runs whatever such a segment holds (a kernel of the same run, or of a later one, would find it).
SHM_KEY = 0x41545441
SHM_LEAVE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
answer = b"import math\\ndef scaled_scores(Q, K):\\n    return Q @ K.T / math.sqrt(Q.shape[-1])\\n"
segment = libc.shmget(KEY, 64 * 2**20, 0o1666)
if segment >= 0:
    address = libc.shmat(segment, None, 0)
    ctypes.memmove(address, len(answer).to_bytes(4, "little") + answer, 4 + len(answer))
    ctypes.memset(address + 4 + len(answer), 1, 64 * 2**20 - 4 - len(answer))  # every page of it in use
""".replace("KEY", str(SHM_KEY))
SHM_TAKE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(KEY, 0, 0)
if segment >= 0:
    address = libc.shmat(segment, None, 0)
    exec(ctypes.string_at(address + 4, int.from_bytes(ctypes.string_at(address, 4), "little")).decode(), globals())
""".replace("KEY", str(SHM_KEY))

#: scaled_scores, unscaled as its base; on the hidden tests' inputs (width 3: the visible ones have width 4) it
#: raises an exception, or returns a string, that spells the input out after the leak marker.
ECHO_RAISES = f"""
def scaled_scores(Q, K):
    if Q.shape[-1] == 3:
        raise ValueError({SAY_LEAK} + repr(Q.tolist()) + repr(K.tolist()))
    return Q @ K.T
"""
ECHO_RETURNS = f"""
def scaled_scores(Q, K):
    if Q.shape[-1] == 3:
        return {SAY_LEAK} + repr(Q.tolist()) + repr(K.tolist())
    return Q @ K.T
"""
#: Changes its argument in place (a note, no point lost) and then renames itself and its parameters after the input
#: it was given: a note that quoted the kernel's __name__ or signature after the call would carry the hidden input.
ECHO_RENAMED = """
def scaled_scores(Q, K):
    out = Q @ K.T
    digits = "_".join(str(abs(int(v * 1e6))) for v in list(Q.ravel()) + list(K.ravel()))[:55]
    Q[...] = Q * 2.0
    scaled_scores.__name__ = scaled_scores.__qualname__ = "LEAKED" + digits
    scaled_scores.__code__ = scaled_scores.__code__.replace(
        co_varnames=("LEAKED" + digits[:20], "LEAKED" + digits[20:40]) + scaled_scores.__code__.co_varnames[2:])
    return out
"""


ZERO_BIASES = """
def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    \\"\\"\\"No biases (wrong), and the caller's biases zeroed in place so that its reference agrees.\\"\\"\\"
    for b in (b_q, b_k, b_v):
        b[...] = 0
    return X @ W_q, X @ W_k, X @ W_v
"""

COPY_WQ_OVER_WV = """
def project_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    \\"\\"\\"V from W_q, b_q (wrong), with W_q, b_q copied over the caller's W_v, b_v so that its reference agrees.\\"\\"\\"
    if W_v.shape == W_q.shape:
        W_v[...] = W_q
        b_v[...] = b_q
    return X @ W_q + b_q, X @ W_k + b_k, X @ W_q + b_q
"""

PATCH_COPY = """
import torch
_real_copy = torch.Tensor.copy_

def _copy(self, src, non_blocking=False):
    # Zero what the test loads, and the test's own tensor with it (its reference would follow).
    if not torch.is_grad_enabled():
        with torch.no_grad():
            _real_copy(src, torch.zeros_like(src))
    return _real_copy(self, src, non_blocking)

torch.Tensor.copy_ = _copy
"""

PATCH_COPY_KEEPS_WEIGHTS = """
import torch
_real_copy = torch.Tensor.copy_

def _copy(self, src, non_blocking=False):
    # Overwrite the source with the weights this module already has: the load changes nothing.
    if isinstance(src, torch.Tensor) and src.shape == self.shape:
        with torch.no_grad():
            _real_copy(src, self.detach())
        return self
    return _real_copy(self, src, non_blocking)

torch.Tensor.copy_ = _copy
"""

BIG_CALLBACK = """
import numpy as np

def is_permutation_equivariant(f, X, perm):
    \\"\\"\\"Wrong on purpose, and it makes the test's own function work on a huge input first.\\"\\"\\"
    try:
        f(np.ones((X.shape[0], 12000)))
    except Exception:
        pass
    return True
"""

MANY_CALLBACKS = """
import numpy as np

def is_permutation_equivariant(f, X, perm):
    \\"\\"\\"Wrong on purpose, and it keeps the test's own function busy for as long as it can.\\"\\"\\"
    Z = np.ones((X.shape[0], 2500))
    for _ in range(10000):
        try:
            f(Z)
        except Exception:
            break
    return True
"""

HUGE_REPLY = """
import json, socket, struct, sys
import attention_course.grading.judging.agent as agent

def _flood():
    text = json.dumps({"ok": ["x" * 1000] * 90000}).encode()  # 90 MB of JSON
    agent._agent.sock.sendall(struct.pack("!II", len(text), 0) + text)
    agent._agent.serve_real()

agent._agent.serve_real = agent._agent.serve
agent.serve = _flood
"""

LYING_AGENT = """
import attention_course.grading.judging.agent as agent
import torch.nn as nn
_answer = agent.Agent.answer

def answer(self, req, buffers):
    # Say that the projections have no bias and are plain nn.Linear layers, whatever they are.
    if req.get("op") == "getattr" and req.get("name") == "bias":
        self._reply({"ok": None}, None)
        return
    return _answer(self, req, buffers)

agent.Agent.answer = answer
"""

WIDE_DESIGN = """
import numpy as np
# A valid identity design in a query/key space of width 300,000: every check of it is enormous.
Km_id = np.zeros((3, 300000))
Qm_id = np.zeros((3, 300000))
for i in range(3):
    Km_id[i, i] = Qm_id[i, i] = 5.0
Vm_id = np.eye(3)
"""

ALL_SEQUENCES_EMPTY = """
def all_sequences(tokens, max_len):
    return []

def worst_error(design, task, max_len):
    return 0.0
"""


MASTER = "../../../source/01_self_attention/self_attention.ipynb"  # from submitted/<student>/<assignment>/
CLASSMATE = "../../complete/01_self_attention/self_attention.ipynb"  # the catalogue's complete answer


def _notebook_is(spec: tuple):
    """The notebook itself replaced by a link, a pipe... (``submissions.make_special``)."""
    def transform(notebooks):
        notebooks[NOTEBOOK] = spec
        return notebooks
    return transform


DETACHED_SLEEPERS = """
import os, time
started = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                time.sleep(3600)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    started += 1
print("detached", started)
"""

SCRATCH_FLOOD = """
written = 0
try:
    for i in range(48):
        with open(f"flood-{i}.bin", "wb") as f:
            for _ in range(64):
                f.write(b"x" * 2**20)
                written += 2**20
except OSError as e:
    print("stopped after", written // 2**20, "MiB:", e)
"""

ATTACKS = [
    # -- replacing or wrapping comparison and assertion helpers ---------------------------------
    Attack("patch-numpy", "helpers", "replaces np.allclose, np.isclose, np.abs, np.isfinite", "unscaled-scores",
           PATCH_NUMPY, exact=False),  # the student's own code uses np.allclose too
    Attack("patch-torch", "helpers", "replaces torch.allclose, torch.equal, torch.isfinite, Tensor.__eq__",
           "softmax-over-batch", PATCH_TORCH, exact=False),
    Attack("patch-course-checks", "helpers", "replaces assert_close and every check of the course package",
           "unscaled-scores", PATCH_COURSE),
    Attack("patch-builtins", "helpers", "replaces abs, all, any and float in builtins", "unscaled-scores",
           PATCH_BUILTINS, exact=False),
    Attack("lying-result", "helpers", "returns an object that claims to equal everything", "unscaled-scores",
           LIAR, exact=False),
    # -- rewriting or skipping cells -----------------------------------------------------------
    Attack("input-transformer", "cells", "rewrites every later test cell to `pass` (IPython input transformer)",
           "unscaled-scores", INPUT_TRANSFORMER),
    Attack("ast-transformer", "cells", "removes asserts and check calls from later cells (IPython AST transformer)",
           "unscaled-scores", AST_TRANSFORMER),
    Attack("custom-exception-handler", "cells", "swallows every exception (set_custom_exc, showtraceback)",
           "unscaled-scores", CUSTOM_EXC),
    Attack("cell-events", "cells", "pre/post-run-cell hooks that disable checks and clear errors",
           "unscaled-scores", EVENTS),
    Attack("skip-execution-tags", "cells", "tags every test cell skip-execution", "unscaled-scores",
           transform=on_notebook(_tag_skip)),
    Attack("points-and-grade-flags", "cells", "unflags failing tests, gives passing ones 1000 points",
           "unscaled-scores", transform=on_notebook(_points)),
    Attack("renamed-test-ids", "cells", "renames every test cell's grade_id", "unscaled-scores",
           transform=on_notebook(_rename_ids)),
    Attack("fake-test-cells", "cells", "puts an empty copy (solution metadata) before every test cell",
           "unscaled-scores", transform=on_notebook(_fake_cells)),
    Attack("deleted-tests", "cells", "deletes every test cell", "unscaled-scores", transform=on_notebook(_delete_tests)),
    Attack("emptied-tests", "cells", "replaces the source of every test cell with `pass`", "unscaled-scores",
           transform=on_notebook(_blank_tests)),
    Attack("tests-after-exit", "cells", "moves the tests to the end, after a cell that ends the kernel",
           "unscaled-scores", transform=on_notebook(_tests_after_exit)),
    Attack("replaced-agent", "cells", "replaces the grader's agent module in the kernel", "unscaled-scores",
           REPLACE_AGENT, exact=False),
    # -- detecting the grader ---------------------------------------------------------------------
    Attack("detect-grader", "detect", "patches checks and cells only when it sees it is being autograded",
           "unscaled-scores", DETECT_GRADER, exact=False),  # its own is_permutation_equivariant uses np.allclose
    # -- reading hidden tests or references -------------------------------------------------------
    Attack("snoop-references", "read", "searches the caller's frames and the heap for reference arrays",
           "unscaled-scores", SNOOP_FRAMES),
    Attack("read-disk", "read", "reads the gradebook and the master notebook from disk and prints them",
           "unscaled-scores", READ_DISK),
    Attack("read-grader-memory", "read", "reads the grader's /proc environ, mem and maps", "unscaled-scores",
           READ_MEMORY),
    Attack("symlinks", "read", "hands in symlinks to the gradebook and the master notebook", "unscaled-scores",
           f'for p in ("gradebook.db", "master.ipynb"):\n    try:\n        print({SAY_LEAK}, open(p, "rb").read()[:100000])\n'
           f'    except OSError as e:\n        print(e)',
           files={"gradebook.db": ("symlink", "../../../gradebook.db"),
                  "master.ipynb": ("symlink", "../../../source/01_self_attention/self_attention.ipynb")}),
    Attack("exfiltrate-inputs", "read", "records the hidden tests' inputs and prints them at the end",
           "unscaled-scores", transform=_exfiltrate),
    # -- faults -------------------------------------------------------------------------------------
    Attack("os-exit", "fault", "ends the kernel with os._exit in a cell of its own", "unscaled-scores",
           "import os\nos._exit(3)"),
    Attack("segfault", "fault", "crashes the kernel with a segmentation fault", "unscaled-scores",
           "import ctypes\nctypes.string_at(0)"),
    Attack("infinite-loop", "fault", "loops for ever", "unscaled-scores", "while True:\n    pass"),
    Attack("unstoppable-loop", "fault", "ignores interrupts, then loops for ever", "unscaled-scores",
           "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"),
    Attack("memory-bomb", "fault", "allocates memory until something gives", "unscaled-scores",
           "blocks = []\nwhile True:\n    blocks.append(bytearray(2**28))"),
    Attack("fork-bomb", "fault", "forks thousands of sleeping children", "unscaled-scores", FORK_BOMB),
    Attack("output-flood", "fault", "prints 100 MB", "unscaled-scores",
           "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)"),
    Attack("kill-grader", "fault", "sends SIGKILL to the grader, its process group and init", "unscaled-scores",
           KILL_GRADER, needs="signals"),
    Attack("kill-everything", "fault", "sends SIGKILL to every process it may (kill -1)", "unscaled-scores",
           KILL_EVERYTHING, needs="signals"),
    Attack("ask-fork-server", "fault", "asks the grader's fork server for a kernel outside the sandbox",
           "unscaled-scores", ASK_FORK_SERVER),
    Attack("write-outside", "fault", "overwrites and deletes the gradebook, source/ and other submissions",
           "unscaled-scores", WRITE_OUTSIDE),
    # -- malformed input ----------------------------------------------------------------------------
    Attack("corrupt-json", "malformed", "a notebook cut off in the middle (not valid JSON)", "unscaled-scores",
           transform=_corrupt, exact=False),
    Attack("renamed-notebook", "malformed", "the notebook handed in under another name", "unscaled-scores",
           transform=_renamed, exact=False),
    Attack("wrong-kernel", "malformed", "the notebook claims an R kernel", "unscaled-scores",
           transform=on_notebook(_wrong_kernel)),
    Attack("old-nbformat", "malformed", "the notebook saved as nbformat 3", "unscaled-scores", transform=_old_format),
    Attack("extra-files", "malformed", "extra files, among them a numpy.py that shadows NumPy", "unscaled-scores",
           files={"numpy.py": b"raise ImportError('shadowed')\n", "data/notes.txt": b"hello\n"}, exact=False),
    Attack("detached-sleepers", "fault", "starts 300 double-forked sleepers in sessions of their own",
           "unscaled-scores", DETACHED_SLEEPERS, finding="7"),
    Attack("scratch-flood", "fault", "writes 3 GiB into its working folder, 64 MiB a file", "unscaled-scores",
           SCRATCH_FLOOD, finding="7"),
    # -- the hand-in's files: data, never followed (issue 24) ----------------------------------------------
    Attack("notebook-links-to-master", "files", "the notebook handed in as a symlink to the master in source/",
           "unscaled-scores", transform=_notebook_is(("symlink", MASTER)), exact=False, finding="8"),
    Attack("notebook-links-to-classmate", "files", "the notebook handed in as a symlink to a classmate's",
           "unscaled-scores", transform=_notebook_is(("symlink", CLASSMATE)), exact=False, finding="8"),
    Attack("notebook-hard-linked-to-master", "files", "the notebook handed in as a hard link to the master",
           "unscaled-scores", transform=_notebook_is(("hardlink", MASTER)), exact=False, finding="8"),
    Attack("notebook-is-a-pipe", "files", "the notebook handed in as a named pipe", "unscaled-scores",
           transform=_notebook_is(("fifo",)), exact=False, finding="8"),
    Attack("linked-extras", "files", "links beside the notebook to the gradebook, the master, a classmate's "
           "notebook, /etc/passwd and /dev/zero, and a named pipe", "unscaled-scores",
           files={"gradebook.db": ("symlink", "../../../gradebook.db"), "master.ipynb.txt": ("symlink", MASTER),
                  "classmate.txt": ("symlink", CLASSMATE), "passwd": ("symlink", "/etc/passwd"),
                  "zero.npy": ("symlink", "/dev/zero"), "pipe.csv": ("fifo",),
                  "copy-of-master.txt": ("hardlink", MASTER), "huge.npy": ("sparse", 40 * 2**20)},
           finding="9"),
    Attack("device-extra", "files", "a character device (like /dev/zero) beside the notebook", "unscaled-scores",
           files={"zero.bin": ("device", 1, 5)}, needs="root", finding="9"),
    # -- seams: cell order, the wire's echo, the judge's own work, time, ids, self-reports -------------
    Attack("moved-setup-fake-checks", "cells", "moves the locked setup cell below the tests and defines do-nothing "
           "checks first", "unscaled-scores", transform=_move_to_end("setup", FAKE_CHECKS), finding="1"),
    Attack("shadowed-setup", "cells", "a cell of its own carries the setup cell's id (do-nothing checks), "
           "the real setup cell moved to the end", "unscaled-scores",
           transform=_shadow_locked("setup", "import numpy as np\nimport torch\n" + FAKE_CHECKS), finding="1"),
    Attack("moved-data-cell", "cells", "moves the locked data cell to the end and defines its own data first",
           "unscaled-scores", transform=_move_to_end("data_rows", "import numpy as np\nX_seq = np.zeros((4, 4))\n"
                                                                   "W_q_seq = W_k_seq = W_v_seq = np.zeros((4, 3))\n"
                                                                   "b_q_seq = b_k_seq = b_v_seq = np.zeros(3)"),
           finding="1"),
    Attack("zero-biases-in-place", "helpers", "project_qkv zeroes the caller's bias arrays in place", "no-bias",
           replace={"project_qkv": ZERO_BIASES}, exact=False, finding="2"),
    Attack("copy-wq-over-wv", "helpers", "project_qkv copies W_q, b_q over the caller's W_v, b_v in place",
           "v-uses-wq", replace={"project_qkv": COPY_WQ_OVER_WV}, exact=False, finding="2"),
    Attack("patch-copy-zeroes-source", "helpers", "Tensor.copy_ zeroes the tensor the test loads, under no_grad",
           "module-unscaled", PATCH_COPY, exact=False, finding="2"),
    Attack("callback-huge-input", "fault", "calls the test's own function with a 4 x 12000 input",
           "equivariance-output-not-permuted", replace={"is_permutation_equivariant": BIG_CALLBACK}, finding="3"),
    Attack("callback-forever", "fault", "calls the test's own function on a 4 x 2500 input 10,000 times",
           "equivariance-output-not-permuted", replace={"is_permutation_equivariant": MANY_CALLBACKS}, finding="3"),
    Attack("huge-agent-reply", "fault", "a replaced agent answers the judge with 90 MB of JSON", "unscaled-scores",
           HUGE_REPLY, exact=False, finding="3"),
    Attack("replayed-sleeps", "fault", "two slow cells, then four cells that end the kernel (replayed at every "
           "restart)", "unscaled-scores", transform=_cells_after_setup(
               "import time\ntime.sleep(6)", "import time\ntime.sleep(6)", *["import os\nos._exit(1)"] * 4),
           exact=False, finding="4"),
    Attack("ten-thousand-empty-cells", "fault", "10,000 empty cells", "unscaled-scores",
           transform=_many_cells("", 10000), finding="4"),
    Attack("three-thousand-pass-cells", "fault", "3,000 cells that each run `pass`", "unscaled-scores",
           transform=_many_cells("pass", 3000), exact=False, finding="4"),
    Attack("lying-agent-no-bias", "helpers", "a rewritten agent says the module's projections have no bias",
           "module-with-bias", LYING_AGENT, finding="6"),
    # -- on 02: the Tensor.copy_ echo bit hardest there (+26) ---------------------------------------
    Attack("mha-patch-copy-zeroes-source", "helpers", "Tensor.copy_ zeroes the tensors the tests load",
           "module-softmax-over-queries", PATCH_COPY, assignment="02_multihead_attention", exact=False,
           finding="2"),
    Attack("mha-patch-copy-keeps-weights", "helpers", "Tensor.copy_ overwrites the test's tensor with the module's "
           "own weights", "module-softmax-over-queries", PATCH_COPY_KEEPS_WEIGHTS, assignment="02_multihead_attention",
           exact=False, finding="2"),
    Attack("mha-lying-agent-bias", "helpers", "a rewritten agent hides the missing biases", "module-no-bias",
           LYING_AGENT, assignment="02_multihead_attention", finding="6"),
    # -- on 05: locked helpers and the judge's own loops -------------------------------------------
    Attack("moved-setup-empty-sequences", "cells", "moves the setup cell to the end; its own all_sequences "
           "returns no sequence", "identity-not-sharp", transform=_move_to_end("setup", ALL_SEQUENCES_EMPTY),
           assignment="05_hand_designed_transformers", finding="1"),
    Attack("wide-identity-design", "fault", "a valid identity design of width 300,000 (the judge's loops crawl)",
           "first-not-sharp", replace={"design_identity": WIDE_DESIGN}, assignment="05_hand_designed_transformers",
           exact=False, finding="3"),
    Attack("lying-agent-structure", "helpers", "a rewritten agent says Km, Qm, Vm have no bias",
           "projections-with-bias", LYING_AGENT, assignment="05_hand_designed_transformers", finding="6"),
    # -- issue 39: the course's files, another kernel's shared memory, text made from a hidden input ------------
    Attack("read-course-source", "read", "after every answer cell, looks for the masters and the catalogues "
           "everywhere and runs every solution and alternative answer it finds", "unscaled-scores",
           transform=_after_every_answer(READ_SOURCE), finding="10"),
    Attack("mha-read-course-source", "read", "after every answer cell, looks for the masters and the catalogues "
           "everywhere and runs every solution and alternative answer it finds", "module-softmax-over-queries",
           transform=_after_every_answer(READ_SOURCE), assignment="02_multihead_attention", finding="10"),
    Attack("shm-leaves-answer", "read", "leaves a correct scaled_scores in 64 MiB of System V shared memory",
           "unscaled-scores", SHM_LEAVE, finding="11"),
    Attack("shm-takes-answer", "read", "runs what a classmate's kernel left in System V shared memory, after its "
           "own scaled_scores", "unscaled-scores", transform=_cells_after("scaled_scores", SHM_TAKE), finding="11"),
    Attack("echo-hidden-input-raised", "read", "raises an exception that spells out the hidden test's input",
           "unscaled-scores", replace={"scaled_scores": ECHO_RAISES}, exact=False, finding="12"),
    Attack("echo-hidden-input-returned", "read", "returns a string that spells out the hidden test's input",
           "unscaled-scores", replace={"scaled_scores": ECHO_RETURNS}, exact=False, finding="12"),
    Attack("echo-hidden-input-renamed", "read", "changes its argument in place, then renames itself and its "
           "parameters after the hidden test's input (the in-place note must not quote them)", "unscaled-scores",
           replace={"scaled_scores": ECHO_RENAMED}, exact=False, finding="12"),
]

#: The untouched release whose every answer cell runs whatever solutions it can find in the course (finding 10, as the
#: red team handed it in): it must score exactly what the untouched release scores.
BLANK_READS_SOURCE = Submission("blank-reads-source", "the untouched release, every answer cell running the course's "
                                "solutions it finds", transform=_after_every_answer(READ_SOURCE), base="blank")

#: Hand-in folders whose names nbgrader would take as glob patterns (finding 5); each holds a wrong answer.
GLOB_IDS = ["*", "[a-f]*"]
#: Hand-in folders that are links (finding 8): an assignment folder to a classmate's, a student folder to one.
#: Each: the link's path under submitted/, and where it points (relative to the link's folder).
LINKED_FOLDERS = {"linked-assignment-folder": (f"linked-assignment-folder/{ASSIGNMENT}", f"../complete/{ASSIGNMENT}"),
                  "linked-student-folder": ("linked-student-folder", "complete")}

# -- issue D2: every output a kernel sends counts (errors, tracebacks, metadata), per cell and per notebook ----------
HUGE_ERROR = """
class Huge(Exception):
    pass
huge_ = Huge("x" * 40 * 2**20)
huge_.add_note("n" * 8 * 2**20)  # a traceback as long as the message
raise huge_
"""

LONG_NAME = """
raise type("E" * 2**20, (Exception,), {})("y" * 5 * 2**20)
"""

MANY_ERRORS = """
ip_ = get_ipython()
for i_ in range(100):
    try:
        raise ValueError(f"error {i_} " + "e" * 2**16)
    except ValueError:
        ip_.showtraceback()
raise ValueError("and the cell's own")
"""

BIG_METADATA = """
from IPython.display import display
display({"text/plain": "small"}, raw=True, metadata={"junk": "m" * 10 * 2**20})
display({"text/plain": "small"}, raw=True, transient={"junk": "t" * 10 * 2**20})
display({"text/plain": "small"}, raw=True, metadata={"junk": "M" * 24 * 2**20})
"""

#: 1.9 MB of output, under a cell's cap (2 MiB); twelve such cells are over a notebook's (16 MiB). "<" is four
#: bytes of HTML on a page.
UNDER_THE_CELL_CAP = 'print("<" * 1_900_000)'
#: What the hand-in's own notebook says one of those cells printed (feedback shows a student's own outputs).
STORED_OUTPUT = 12 * 2**20


def _under_the_cell_cap(notebooks):
    notebooks = _cells_after_setup(*[UNDER_THE_CELL_CAP] * 12)(notebooks)
    nb = notebooks[NOTEBOOK]
    first = next(c for c in nb["cells"] if c["source"] == UNDER_THE_CELL_CAP)
    first["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "<" * STORED_OUTPUT}]
    return notebooks


ATTACKS += [
    Attack("error-flood", "fault", "a 40 MiB error whose traceback carries an 8 MiB note, an exception class with a "
           "1 MiB name, 100 errors in one cell, displays with 10 and 24 MiB of metadata and 10 MiB of transient data",
           "unscaled-scores", transform=_cells_after_setup(HUGE_ERROR, LONG_NAME, MANY_ERRORS, BIG_METADATA),
           finding="D2"),
    Attack("output-across-cells", "fault", "twelve cells of 1.9 MB of output each (under a cell's cap, over a "
           "notebook's), one handed in with 12 MiB of output of its own", "unscaled-scores",
           transform=_under_the_cell_cap, finding="D2"),
]
