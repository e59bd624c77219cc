"""Boot kernels in the course's sandbox, attack them, close them, and print what happened as JSON.

``sandbox_attacks.py cgroups|no-cgroups [--no-isolation]``. test_sandbox.py runs it as root with and without cgroups and as an
ordinary user, so that each attack is shown to be stopped by the layers that do not depend on cgroups; ``hog``: :func:`cpu_hog`.

Two phases. First one kernel takes the resource attacks (memory, detached sleepers, a fork bomb, a scratch flood).
Then the isolation attacks: kernel A leaves System V shared memory, a message queue and a semaphore set, POSIX
shared memory and a POSIX message queue, and tries to read the course (by name and by search), to reach Unix
sockets of the grader's user by path and by abstract name, to change modes, owners, times and attributes of what
it sees, and to read the grader's session keyring; kernel B, alive at the same time, and kernel C, started after
both closed (a later grading run), look for what A left. The grader's side records who connected to its sockets
and the host's IPC before and after.
"""

import ctypes
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from attention_course.grading.judging.executor import JudgedExecute
from attention_course.grading.kernels.kernel import Kernel

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE.parent / "catalogue"), str(ROOT)]  # the catalogues and the repository (tools/)
from adversarial import DETACHED_SLEEPERS, FORK_BOMB, SCRATCH_FLOOD  # noqa: E402

MEMORY_BOMB = """
blocks = []
try:
    while True:
        blocks.append(b"x" * 2**26)
except MemoryError:
    print("stopped at", len(blocks) * 64, "MiB")
blocks = None
"""
ATTACKS = {"whoami": "import os\nprint('uid', os.getuid(), 'pid', os.getpid())", "memory": MEMORY_BOMB,
           "sleepers": DETACHED_SLEEPERS, "fork_bomb": FORK_BOMB, "scratch": SCRATCH_FLOOD}

#: The name every IPC object of the isolation attacks carries (a System V key, a POSIX name).
IPC_KEY, IPC_NAME = 0x41747431, "attention-shared"
#: The key a grader's session keyring holds (planted by this tool, looked for by the kernel).
KEY_NAME = "attention-grader-secret"

LEAVE_IPC = f"""
import ctypes, os
from multiprocessing import shared_memory
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
made = []
shm = libc.shmget({IPC_KEY}, 64 * 2**20, 0o1666)
if shm >= 0:
    addr = libc.shmat(shm, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        ctypes.memmove(addr, b"answers:complete", 16)
        made.append("sysv-shm")
if libc.msgget({IPC_KEY}, 0o1666) >= 0:
    made.append("sysv-msg")
if libc.semget({IPC_KEY}, 4, 0o1666) >= 0:
    made.append("sysv-sem")
try:
    block = shared_memory.SharedMemory(name="{IPC_NAME}", create=True, size=64 * 2**20)
    block.buf[:16] = b"answers:complete"
    made.append("posix-shm")
except OSError as exc:
    print("posix shm:", exc)
if libc.mq_open(b"/{IPC_NAME}", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0:
    made.append("posix-mq")
print("made", made)
"""

TAKE_IPC = f"""
import ctypes, os
from multiprocessing import shared_memory
libc = ctypes.CDLL(None, use_errno=True)
found = []
if libc.shmget({IPC_KEY}, 0, 0) >= 0:
    found.append("sysv-shm")
if libc.msgget({IPC_KEY}, 0) >= 0:
    found.append("sysv-msg")
if libc.semget({IPC_KEY}, 0, 0) >= 0:
    found.append("sysv-sem")
try:
    shared_memory.SharedMemory(name="{IPC_NAME}")
    found.append("posix-shm")
except OSError:
    pass
if libc.mq_open(b"/{IPC_NAME}", os.O_RDWR) >= 0:
    found.append("posix-mq")
try:
    for line in open("/proc/sysvipc/shm").read().splitlines()[1:]:
        found.append("visible segment " + line.split()[0])
except OSError:
    pass
print("found", found)
"""

#: Reads the course by name and by search. ``{targets}``: paths of the course that exist on the host.
READ_COURSE = """
import os, sys
found, walked = [], 0
for path in {targets!r}:
    for attempt in (lambda: open(path, "rb").read(64), lambda: os.listdir(path), lambda: os.stat(path)):
        try:
            attempt()
            found.append(path)
            break
        except OSError:
            pass
here = os.getcwd()
starts = {{"/", "/tmp", "/home", "/root", "/work", "/srv", "/var", "/run", "/dev/shm", "/etc", here}}
for path in list(sys.path) + [here, sys.prefix]:
    while path not in ("", "/"):
        starts.add(path)
        path = os.path.dirname(path)
wanted = ("catalogue.py", "gradebook.db", "nbgrader_config.py", "adversarial.py", "self_attention.ipynb",
          "masking.ipynb", "attention_backward.ipynb", "canary")
# the Python installation and /usr hold packages' own test files (nbgrader's gradebook.db): public, not searched
public = tuple(os.path.realpath(p) + "/" for p in (sys.prefix, sys.base_prefix, "/usr"))
for start in sorted(starts):
    for root, dirs, files in os.walk(start):
        if root.startswith(("/proc", "/sys")) or (os.path.realpath(root) + "/").startswith(public):
            dirs[:] = []
            continue
        for name in files + dirs:
            walked += 1
            if name.endswith(wanted) or "canary" in name:
                found.append(os.path.join(root, name))
print("found", sorted(set(found)), "walked", walked)
"""

#: Reaches past the kernel: Unix sockets by path and by abstract name, modes, owners, times and attributes of
#: everything it may see, the grader's session keyring. ``{sockets}``, ``{abstract}``, ``{targets}``.
REACH = """
import ctypes, json, os, platform, socket, stat
libc = ctypes.CDLL(None, use_errno=True)
got = {{"sockets": {{}}, "changed": [], "tried": 0}}
for path in {sockets!r} + ["\\0" + {abstract!r}]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        got["sockets"][path] = "connected"
    except OSError as exc:
        got["sockets"][path] = exc.strerror
    s.close()
mine = os.getuid()
got["owned"] = 0  # files of the kernel's own user it tried (a grader that is not root owns its scratch folder)
scratch = os.path.dirname(os.path.dirname(os.getcwd()))
candidates = list({targets!r}) + [scratch, "/", "/dev", "/dev/null", "/tmp"]
for top in [scratch, os.path.dirname(os.__file__), __import__("attention_course").__path__[0]]:
    for root, dirs, files in os.walk(top):
        if root.startswith(os.getcwd().rsplit("/", 1)[0]):  # the kernel's own scratch file system
            dirs[:] = []
            continue
        candidates += [os.path.join(root, n) for n in dirs + files]
for path in candidates[:20000]:
    try:
        st = os.lstat(path)
    except OSError:
        continue
    if stat.S_ISLNK(st.st_mode):
        continue
    got["tried"] += 1
    got["owned"] += st.st_uid == mine
    for what, change in (("chmod", lambda: os.chmod(path, stat.S_IMODE(st.st_mode))),
                         ("chown", lambda: os.chown(path, st.st_uid, st.st_gid)),
                         ("utime", lambda: os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))),
                         ("xattr", lambda: os.setxattr(path, "user.attention", b"x"))):
        try:
            change()
            got["changed"].append(f"{{what}} {{path}}")
        except OSError:
            pass
keyctl = {{"x86_64": 250, "aarch64": 219}}.get(platform.machine(), -1)
found = libc.syscall(keyctl, 10, -3, b"user", {key!r}.encode(), 0)  # KEYCTL_SEARCH in the session keyring
got["keyring"] = "found" if found >= 0 else os.strerror(ctypes.get_errno())
print("reach", json.dumps(got))
"""


def survivors(probe, grace: float = 30.0) -> list:
    """What ``probe()`` still finds after up to ``grace`` seconds. Killed processes may still be tearing down their
    memory (state R, no command line any more) for a while on a busy machine; what is there after that outlived
    what should have ended it."""
    deadline = time.monotonic() + grace
    while (left := probe()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def in_namespace(ns: str) -> list[str]:
    """Processes of the PID namespace ``ns`` (state and command line), zombies aside."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == ns:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(f"{pid} {state} {open(f'/proc/{pid}/cmdline', 'rb').read()[:80]!r}")
        except OSError:
            pass
    return found


def host_ipc() -> dict:
    """The host's shared memory as the grader sees it: System V segments (bytes, and ours by key), POSIX shared
    memory in /dev/shm (ours by name), whether a POSIX message queue of ours exists."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    mq = libc.mq_open(f"/{IPC_NAME}".encode(), os.O_RDONLY)
    if mq >= 0:
        libc.mq_close(mq)
    return {"sysv_bytes": sum(int(line.split()[3]) for line in lines),
            "ours": [line.split()[0] for line in lines if int(line.split()[0]) == IPC_KEY]
            + [q for q in ("msg", "sem") if any(int(line.split()[0]) == IPC_KEY for line in
                                                 Path(f"/proc/sysvipc/{q}").read_text().splitlines()[1:])]
            + (["posix-shm"] if os.path.exists(f"/dev/shm/{IPC_NAME}") else []) + (["posix-mq"] if mq >= 0 else [])}


class Listener(threading.Thread):
    """A Unix socket of the grader's user (by path, mode 0777, or by abstract name) that notes who connects."""

    def __init__(self, address: str):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        if not address.startswith("\0"):
            os.chmod(address, 0o777)
        self.sock.listen(8)
        self.connected = 0
        self.start()

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connected += 1
            conn.close()


def plant_key() -> bool:
    """A key in a new session keyring of this process (the kernels are forked below it): what a grader's login
    session may hold (credentials of a mount, a token)."""
    import platform

    nr = {"x86_64": (250, 248), "aarch64": (219, 217)}.get(platform.machine())
    if nr is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl, add_key = nr
    if libc.syscall(keyctl, 1, b"attention-grader", 0, 0, 0) < 0:  # KEYCTL_JOIN_SESSION_KEYRING
        return False
    return libc.syscall(add_key, b"user", KEY_NAME.encode(), b"secret", 6, -3) >= 0  # into the session keyring


def run(kernel: Kernel, code: str) -> dict:
    start = time.monotonic()
    outputs, status, _ = kernel.run(code, 120)
    return {"status": status, "seconds": round(time.monotonic() - start, 1), "alive": kernel.alive(),
            "text": "".join(o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}" for o in outputs)[-3000:]}


def resources(settings: dict) -> dict:
    kernel = Kernel(settings, logging.getLogger("attacks"))
    found = {"facts": kernel.facts, "cgroups": [str(d) for _, _, d in kernel.cgroups.dirs]}
    ns = os.readlink(f"/proc/{kernel.proc.pid}/ns/pid_for_children")
    try:
        for name, code in ATTACKS.items():
            found[name] = run(kernel, code)
        found["running_before_close"] = len(in_namespace(ns))
    finally:
        scratch = kernel.scratch
        kernel.close()
    found["left_running"] = survivors(lambda: in_namespace(ns))
    found["scratch_left"] = scratch.exists()
    return found


def isolation(settings: dict) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="attention-attacks-", dir="/tmp"))  # short enough for a socket path, like tmux's
    os.chmod(tmp, 0o755)
    course = tmp / "course"  # what a grader's course folder holds, owned by the grader
    (course / "source" / "01_self_attention").mkdir(parents=True)
    (course / "source" / "01_self_attention" / "catalogue.py").write_text("CANARY = 'answers'\n")
    (course / "gradebook.db").write_text("canary")
    targets = [str(p) for p in (course / "source" / "01_self_attention" / "catalogue.py", course / "gradebook.db",
                                course / "source", course, ROOT / "source" / "01_self_attention" / "catalogue.py",
                                ROOT / "nbgrader_config.py", ROOT / "tests" / "catalogue" / "adversarial.py",
                                ROOT / "source", ROOT / "tests")]
    before = {p: os.stat(p) for p in targets}
    sockets = [str(tmp / "grader.sock"), f"/tmp/attention-grader-{os.getpid()}.sock"]
    listeners = [Listener(a) for a in sockets + [f"\0attention-grader-{os.getpid()}"]]
    for address in sockets + [f"\0attention-grader-{os.getpid()}"]:  # the control: the grader's side reaches them
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(address)
    keyring = plant_key()
    ipc_before = host_ipc()
    found = {"keyring_planted": keyring}
    try:
        a, b = Kernel(settings, logging.getLogger("attacks")), Kernel(settings, logging.getLogger("attacks"))
        try:
            found["facts"] = a.facts
            found["leave"] = run(a, LEAVE_IPC)
            found["take_own"] = run(a, TAKE_IPC)  # the control: what A made, A finds
            found["take_same_run"] = run(b, TAKE_IPC)
            found["ipc_while_running"] = host_ipc()
            found["course"] = run(a, READ_COURSE.format(targets=targets))
            found["reach"] = run(a, REACH.format(sockets=sockets, abstract=f"attention-grader-{os.getpid()}",
                                                 targets=targets + [str(tmp), tempfile.gettempdir()], key=KEY_NAME))
        finally:
            a.close()
            b.close()
        c = Kernel(settings, logging.getLogger("attacks"))
        try:
            found["take_next_run"] = run(c, TAKE_IPC)
        finally:
            c.close()
        found["ipc_before"], found["ipc_after"] = ipc_before, host_ipc()
        found["connected"] = sum(listener.connected for listener in listeners)  # 3 from the control
        found["unchanged"] = {p: (os.stat(p).st_mode, os.stat(p).st_mtime_ns, os.stat(p).st_uid) ==
                              (before[p].st_mode, before[p].st_mtime_ns, before[p].st_uid) for p in targets}
        found["xattrs"] = {p: os.listxattr(p) for p in targets if os.access(p, os.R_OK)}
    finally:
        for listener in listeners:
            listener.sock.close()
        os.unlink(sockets[1])
        shutil.rmtree(tmp, ignore_errors=True)
    return found


#: The red team's hog: 48 children, each calling setsid(), that spin together once all 48 exist (children
#: spinning while the kernel still forks the rest share its one-core share with it: the cell took 8 s to return).
SETSID_HOG = ("import os\nr, w = os.pipe()\nfor _ in range(48):\n    if os.fork() == 0:\n        os.setsid()\n"
              "        os.close(w)\n        os.read(r, 1)\n        while True:\n            pass\n"
              "os.close(w)\nprint('started 48')")
TRY_NICE = "import os\ntry:\n    os.setpriority(os.PRIO_PROCESS, 0, -1)\nexcept OSError as e:\n    print('refused', e)\nprint('nice', os.getpriority(0, 0))"
#: A batch policy, which a kernel could switch on and off between the readings of the limits' clock (kernels.clock).
TRY_BATCH = ("import os\ntry:\n    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))\nexcept OSError as e:\n"
             "    print('refused', e)\nprint('policy', os.sched_getscheduler(0))")


def below(root: int) -> dict:
    """``{pid: (ppid, CPU ticks of all its threads, nice, session)}`` of ``root`` and every process below it."""
    every, found, todo = {}, {}, [root]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            every[int(pid)] = (int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[16]), int(rest[3]))
        except (OSError, IndexError, ValueError):
            pass
    while todo:
        found.update({parent: every[parent]} if (parent := todo.pop()) in every else {})
        todo += [p for p, v in every.items() if v[0] == parent]
    return found


def cpu_hog(settings: dict) -> dict:
    """The red team's hog (48 busy children, each calling setsid(); the cell returns once they spin): its CPU (cores) for 3 s
    and their sessions; then, its children killed from outside (a kernel beside 48 busy siblings in its own share
    answers slowly on a busy machine: its own doing), its own cells (one tries to lower its nice)."""
    kernel, hz = Kernel(settings, logging.getLogger("attacks")), os.sysconf("SC_CLK_TCK")
    found, top = {"facts": kernel.facts}, kernel.proc.pid
    hog = lambda: {p: v for p, v in below(top).items() if p != top}  # noqa: E731  (the kernel and its children)
    try:
        found["threads"], found["start"] = run(kernel, "import torch\nprint(torch.get_num_threads())"), run(kernel, SETSID_HOG)
        time.sleep(1)
        before, start, _ = {p: v[1] for p, v in hog().items()}, time.monotonic(), time.sleep(3)  # (in this order)
        found["alone"] = round(sum(v[1] - before.get(p, 0) for p, v in hog().items()) / hz / (time.monotonic() - start), 2)
        found["sessions"], found["cpu_stat"] = sorted({v[3] for v in hog().values()}), kernel.cgroups.cpu_stat()
        parents = [v[0] for v in hog().values()]
        for pid in [p for p, v in hog().items() if v[0] == max(set(parents), key=parents.count)]:
            os.kill(pid, 9)  # the busy children (the kernel is their parent)
        found["batch"] = run(kernel, TRY_BATCH)
        found["renice"], found["after"] = run(kernel, TRY_NICE), run(kernel, "print(sum(range(10**5)))")  # works on
        start, status = time.monotonic(), kernel.run("while True:\n    pass", 4)[1]
        found["busy_cell"] = {"status": status, "seconds": round(time.monotonic() - start, 1)}
    finally:
        kernel.close()
    found["left_running"] = survivors(lambda: list(below(top)))
    return found


def main(mode: str) -> None:
    if mode == "hog":
        return print(json.dumps(cpu_hog(dict(JudgedExecute().settings(), cgroups=sys.argv[2] == "cgroups"))))
    settings = dict(JudgedExecute().settings(), cgroups=mode == "cgroups", memory_bytes=2 * 2**30, scratch_bytes=128 * 2**20)
    found = resources(settings)
    if "--no-isolation" not in sys.argv:
        found["isolation"] = isolation(settings)
    print(json.dumps(found))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main(sys.argv[1])
