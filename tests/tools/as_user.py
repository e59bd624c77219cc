"""Run a command as an ordinary user (uid and gid 65534), from root: ``as_user.py PATH[:PATH...] -- CMD...``.

The command runs in a mount namespace of its own in which each PATH (the Python installation, the course,
a temporary folder) is reachable for that user even below folders only root may enter (``/root``, a
``mktemp -d`` folder): the course sandbox's own :func:`attention_course.grading.sandbox._expose` does it.
The tests use it to grade as an ordinary user on a machine where only root is logged in.
"""

import ctypes
import os
import sys

from attention_course.grading import sandbox

USER = 65534


def main(argv: list[str]) -> None:
    paths, cmd = argv[0].split(":"), argv[argv.index("--") + 1:]
    if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:
        sys.exit("as_user: no mount namespace")
    sandbox._mount("none", "/", None, sandbox._MS_REC | sandbox._MS_PRIVATE)
    notes = sandbox._expose(paths, USER, USER)
    if notes:
        sys.exit(f"as_user: {notes}")
    os.setgroups([])
    os.setresgid(USER, USER, USER)
    os.setresuid(USER, USER, USER)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
