"""Boot one kernel in the course's sandbox, attack it, close it, and print what happened as JSON.

``sandbox_attacks.py cgroups|no-cgroups``. test_sandbox.py runs it as root with and without cgroups and as an
ordinary user, so that each attack is shown to be stopped by the layers that do not depend on cgroups.
"""

import json
import logging
import os
import sys
import time
from pathlib import Path

from attention_course.grading.executor import JudgedExecute
from attention_course.grading.kernel import Kernel

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "catalogue"), str(HERE.parents[1])]  # the catalogues and the repository (tools/)
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


def survivors(probe, grace: float = 10.0) -> list:
    """What ``probe()`` still finds after up to ``grace`` seconds. Killed processes may still be tearing down their
    memory (state R, no command line any more) for a moment on a busy machine; what is there after that outlived
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


def main(mode: str) -> None:
    settings = dict(JudgedExecute().settings(), cgroups=mode == "cgroups", memory_bytes=2 * 2**30,
                    scratch_bytes=128 * 2**20)
    kernel = Kernel(settings, logging.getLogger("attacks"))
    found = {"facts": kernel.facts, "cgroups": [str(d) for _, _, d in kernel.cgroups.dirs]}
    ns = os.readlink(f"/proc/{kernel.proc.pid}/ns/pid_for_children")
    try:
        for name, code in ATTACKS.items():
            start = time.monotonic()
            outputs, status, _ = kernel.run(code, 60)
            found[name] = {"status": status, "seconds": round(time.monotonic() - start, 1), "alive": kernel.alive(),
                           "text": "".join(o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}"
                                           for o in outputs)[-400:]}
        found["running_before_close"] = len(in_namespace(ns))
    finally:
        scratch = kernel.scratch
        kernel.close()
    found["left_running"] = survivors(lambda: in_namespace(ns))
    found["scratch_left"] = scratch.exists()
    print(json.dumps(found))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main(sys.argv[1])
