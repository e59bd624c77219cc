"""Run a command as an ordinary user, from root: ``as_user.py [--user UID] PATH[:PATH...] -- CMD...``.

The user is uid and gid 65534 unless ``--user`` names another (a user a test created). The command runs in a
mount namespace of its own in which each PATH (the Python installation, the course, a temporary folder) is
reachable for that user even below folders only root may enter (``/root``, a ``mktemp -d`` folder): each such
folder is covered by an empty, read-only file system that holds only those paths. The tests use it to grade as an
ordinary user on a machine where only root is logged in.
"""

import ctypes
import os
import stat
import sys

from attention_course.grading.kernels import sandbox

USER = 65534


def _can(st: os.stat_result, uid: int, gid: int, bits: int) -> bool:
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & bits == bits


def _blocked(path: str, uid: int, gid: int) -> str | None:
    """The first folder on the way to ``path`` that ``uid`` may not pass through (None: it reaches it)."""
    parts = path.strip("/").split("/")
    for i in range(len(parts) - 1):
        folder = "/" + "/".join(parts[: i + 1])
        try:
            if not _can(os.stat(folder), uid, gid, 1):
                return folder
        except OSError:
            return None
    return None


def _expose(paths: list[str], uid: int, gid: int) -> list[str]:
    """Make every path in ``paths`` reachable for ``uid`` in this mount namespace: a folder on the way that
    ``uid`` may not pass through is covered by an empty, read-only file system that holds only those paths
    (bind mounts of the originals), so nothing else below it can be seen."""
    notes = []
    wanted = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    for _ in range(len(wanted) + 1):
        stuck = next(((p, b) for p in wanted if (b := _blocked(p, uid, gid))), None)
        if stuck is None:
            return notes
        _, cover = stuck
        under = [p for p in wanted if p.startswith(cover + "/")]
        tops = [p for p in under if not any(q != p and p.startswith(q + "/") for q in under)]
        fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in tops}
        try:
            if not sandbox._mount("tmpfs", cover, "tmpfs", sandbox._MS_NOSUID | sandbox._MS_NODEV, "size=1m,mode=755"):
                return notes + [f"could not cover {cover}: {sandbox._err()}: uid {uid} cannot reach {', '.join(tops)}"]
            for path, fd in fds.items():
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                os.makedirs(path if is_dir else os.path.dirname(path), mode=0o755, exist_ok=True)
                if not is_dir:
                    open(path, "w").close()
                if not sandbox._mount(f"/proc/self/fd/{fd}", path, None, sandbox._MS_BIND | sandbox._MS_REC):
                    notes.append(f"could not expose {path}: {sandbox._err()}")
            sandbox._mount(None, cover, None, sandbox._MS_RDONLY | sandbox._MS_NOSUID | sandbox._MS_NODEV | 0x20, None)  # MS_REMOUNT
        finally:
            for fd in fds.values():
                os.close(fd)
    return notes + ["some paths stay out of reach"]


def main(argv: list[str]) -> None:
    uid = USER
    if argv[0] == "--user":
        uid, argv = int(argv[1]), argv[2:]
    paths, cmd = argv[0].split(":"), argv[argv.index("--") + 1:]
    if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:
        sys.exit("as_user: no mount namespace")
    sandbox._mount("none", "/", None, sandbox._MS_REC | sandbox._MS_PRIVATE)
    notes = _expose(paths, uid, uid)
    if notes:
        sys.exit(f"as_user: {notes}")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
