"""A student's race against collect: ``race.py WATCH TRIGGER A B [--remove]``.

Watches the folder WATCH with inotify and, the moment the grader opens the file TRIGGER in it, swaps A and B
atomically (``renameat2(RENAME_EXCHANGE)``: a folder of the hand-in for a link to somewhere else), or with
``--remove`` renames A to B (the folder is gone mid-copy). Prints READY once the watch is set, then SWAPPED, or LATE
when the grader had already closed TRIGGER by the time the swap was done (a busy machine kept the racer waiting
past the copy: the race did not land mid-copy, and says nothing of the grader), or TIMEOUT after 120 s. Run as the
student, an ordinary user, from ``as_user.py``.
"""

import ctypes
import os
import select
import struct
import sys

IN_OPEN = 0x20
IN_CLOSE_NOWRITE = 0x10
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def main(argv: list[str]) -> int:
    watch, trigger, a, b = argv[:4]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, watch.encode(), IN_OPEN | IN_CLOSE_NOWRITE) < 0:
        print(f"inotify: {os.strerror(ctypes.get_errno())}", flush=True)
        return 1
    print("READY", flush=True)
    while select.select([fd], [], [], 120)[0]:
        events = _events(fd)
        if (IN_OPEN, trigger) in events:
            if "--remove" in argv:
                os.rename(a, b)
            elif libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
                print(f"renameat2: {os.strerror(ctypes.get_errno())}", flush=True)
                return 1
            closed = (IN_CLOSE_NOWRITE, trigger) in events + (_events(fd) if select.select([fd], [], [], 0)[0] else [])
            print("LATE" if closed else "SWAPPED", flush=True)
            return 0
    print("TIMEOUT", flush=True)
    return 1


def _events(fd: int) -> list[tuple[int, str]]:
    """The events queued on the inotify descriptor: (kind, file name), in order."""
    buf, i, found = os.read(fd, 65536), 0, []
    while i < len(buf):
        _, mask, _, length = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + length].rstrip(b"\0").decode()
        i += 16 + length
        found += [(kind, name) for kind in (IN_OPEN, IN_CLOSE_NOWRITE) if mask & kind]
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
