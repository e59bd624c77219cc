"""The Unix users of a class on one machine (a trial on JupyterHub, and the tests' users): made with homes of their
own (0700) and removed with every process and file of theirs, or named when they cannot be."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import UsageError, UsersNotRemoved


def make_users(names: list[str]) -> dict[str, str]:
    """Create each user (home 0700: nobody reads another's nbgrader cache or fetched feedback) with a random
    password; return the passwords."""
    passwords: dict[str, str] = {}
    try:
        for name in names:
            home = _home_base() / name
            if os.path.lexists(home):  # useradd would only warn, and the user would get a home that is not hers
                raise UsageError(f"{home} is there already (a former user's?): the trial makes {name} a new home; "
                                 f"remove it (sudo rm -r {home}) or start the trial with other names")
            made = add_user(name, "/bin/bash")
            if made.returncode != 0:
                raise RuntimeError(f"useradd {name}: {made.stderr.strip()}")
            passwords[name] = secrets.token_urlsafe(12)
            Path("~" + name).expanduser().chmod(0o700)
            subprocess.run(["chpasswd"], input=f"{name}:{passwords[name]}\n", text=True, check=True)
    except BaseException as exc:
        undo_users(list(passwords), exc)  # only those made here: never a user that was there before
        raise
    return passwords


def add_user(name: str, shell: str) -> subprocess.CompletedProcess:
    """``useradd`` with a home and a group of the user's own, tried again for up to 10 s while another useradd or
    userdel (a class made beside this one, a test beside this one) holds the lock on /etc/passwd."""
    for _ in range(20):
        made = subprocess.run(["useradd", "--create-home", "--user-group", "--shell", shell, name], capture_output=True,
                              text=True)
        if made.returncode == 0 or "lock" not in made.stderr:
            break
        time.sleep(0.5)
    return made


def _home_base() -> Path:
    """Where useradd makes homes (``useradd -D``: HOME, /home by default)."""
    defaults = subprocess.run(["useradd", "-D"], capture_output=True, text=True).stdout
    return Path(next((line.split("=", 1)[1].strip() for line in defaults.splitlines() if line.startswith("HOME=")),
                     "/home"))


def undo_users(names: list[str], cause: BaseException) -> None:
    """Remove the users a failed step made; any left are added to ``cause``'s notes (it is still the error raised)."""
    try:
        remove_users(names)
    except UsersNotRemoved as left:
        cause.add_note(str(left))


def remove_users(names: list[str], keep_home: frozenset | set = frozenset(), tries: int = 100) -> None:
    """Remove users this class made: their processes, their homes (but those of ``keep_home``), and what they left in
    the temporary folder (the scratch folders of the kernels their servers ran when the hub stopped them, which userdel
    leaves). A user still there after ``tries`` (10 s: userdel refuses while a process just killed has not exited, or
    another useradd or userdel holds the lock on /etc/passwd) is named, with userdel's last word, in
    :class:`.UsersNotRemoved`, raised once every other user and file has been dealt with."""
    uids, left = set(), {}
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
        for _ in range(tries):
            for who in ("-u", "-U"):  # its processes by effective and by real uid (su waiting for a password)
                subprocess.run(["pkill", "-KILL", who, name], capture_output=True)
            done = subprocess.run(["userdel", *([] if name in keep_home else ["--remove"]), name],
                                  capture_output=True, text=True)
            if done.returncode == 12:  # the account is gone, its home could not be removed: said, not retried
                left[name] = f"its home was left: {done.stderr.strip()}"
                break
            if done.returncode in (0, 6) or _gone(name):  # 6: no such user (gone meanwhile)
                left.pop(name, None)
                break
            left[name] = done.stderr.strip() or f"userdel exited with status {done.returncode}"
            time.sleep(0.1)
    uids.discard(0)
    for entry in (e for base in {"/tmp", tempfile.gettempdir()} for e in os.scandir(base)) if uids else ():
        try:
            if entry.stat(follow_symlinks=False).st_uid in uids:
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)
        except OSError:  # gone meanwhile: the users are removed whatever is left
            pass
    if left:
        raise UsersNotRemoved("these users could not be removed: " + "; ".join(f"{n} ({why})" for n, why in left.items())
                              + ". Remove each by hand once its processes have ended: sudo pkill -KILL -u NAME; "
                              "sudo userdel --remove NAME")


def _gone(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return True
    return False
