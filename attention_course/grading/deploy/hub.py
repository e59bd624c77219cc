"""A class on JupyterHub: the environment every user runs, the class's users and exchange, and a hub on one machine.

``make hub`` (:mod:`.trial`) starts a trial class on this machine: an instructor and students
who are real Unix users (made here, homes 0700, removed again when the hub stops), a shared exchange whose course
folder the instructor owns before any student exists, and JupyterHub on loopback with the configuration of
``deploy/jupyterhub/``. The end-to-end test (``tests/test_hub.py``) runs a whole term's cycle through it.
docs/jupyterhub.md says how to do the same on a real server.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..course import COURSE_ID, ROOT
from ..errors import UsageError
from .environment import compile_tree, fill_env
from .hub_trial import save_work
from .users import make_users, remove_users, undo_users

DEPLOY = ROOT / "deploy" / "jupyterhub"
#: Where the shared environment goes unless told otherwise: outside every home, readable by every user.
ENV_PREFIX = Path("/opt/attention-from-scratch/env")
#: What every user's server runs: the course's pinned list and the hub's.
REQUIREMENTS = (ROOT / "requirements.txt", DEPLOY / "requirements-hub.txt")
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (``path`` included) that a user who is neither its owner nor in
    its group cannot pass through, or None when every user can reach it."""
    path = Path(os.path.realpath(path))
    for folder in [*reversed(path.parents), path]:
        try:
            mode = folder.stat().st_mode
        except OSError:
            return folder
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return folder
    return None


def _relocatable_python(base: Path, dest: Path) -> Path:
    """Copy the interpreter and standard library of the Python at ``base`` to ``dest`` (its own site-packages, its
    test suite and bytecode left behind), with the library path the binary carries made relative to itself, so
    that any user can run the copy. Returns the copy's interpreter."""
    skip = shutil.ignore_patterns("site-packages", "test", "tests", "__pycache__", "idlelib", "tkinter", "turtledemo")
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(base / "bin" / PY, dest / "bin" / PY)
    (dest / "lib").mkdir(exist_ok=True)
    for lib in (base / "lib").glob("libpython*.so*"):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=False)
    shutil.copytree(base / "lib" / PY, dest / "lib" / PY, ignore=skip, symlinks=True, dirs_exist_ok=True)
    (dest / "lib" / PY / "site-packages").mkdir(exist_ok=True)
    binary = dest / "bin" / PY
    data = binary.read_bytes()
    old = str(base / "lib").encode() + b"\0"
    if data.count(old) == 1:  # RUNPATH names the original folder (pyenv's builds): point it beside the copy
        new = b"$ORIGIN/../lib"
        binary.write_bytes(data.replace(old, new + b"\0" * (len(old) - len(new))))
    return binary


def _requirements_key() -> str:
    digest = hashlib.sha256(sys.version.encode())
    for path in REQUIREMENTS:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def shared_env(prefix: Path = ENV_PREFIX, log=print) -> Path:
    """The environment every user's server and kernels run (built once per pinned list, reused after that): a
    virtual environment of the course's Python, readable by all, with ``requirements.txt``, the hub's
    ``requirements-hub.txt``, the course package (a copy, not a link into the instructor's folder) and the
    students' Jupyter and nbgrader configuration (``deploy/jupyterhub/student``) in ``<env>/etc/jupyter``.
    Where the course's Python lies below a folder other users cannot enter (pyenv under ``/root``), a copy of
    its interpreter and standard library goes into ``<prefix>/python`` first. Returns the environment's bin/."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "w") as lock:  # one builder at a time (make hub, the test)
        fcntl.flock(lock, fcntl.LOCK_EX)
        _build_env(prefix, log)
    return prefix / "bin"


def _build_env(prefix: Path, log) -> None:
    key = _requirements_key()
    stamp = prefix / ".installed"
    if not (stamp.exists() and stamp.read_text().strip() == key):
        started = time.monotonic()
        if prefix.exists() and any(prefix.iterdir()):
            if not (prefix / "pyvenv.cfg").exists():  # never remove a folder that is not an environment
                raise UsageError(f"{prefix} is not empty and not an environment: choose another folder (HUB_ENV=)")
            shutil.rmtree(prefix)
        prefix.mkdir(parents=True, exist_ok=True)
        base = Path(sys.base_prefix)
        python = base / "bin" / PY
        if closed_to_others(python) is not None:
            log(f"{closed_to_others(python)} is closed to other users: copying Python {sys.version.split()[0]} "
                f"to {prefix / 'python'}")
            python = _relocatable_python(base, prefix / "python")
        subprocess.run([str(python), "-m", "venv", "--without-pip", str(prefix)], check=True)
        fill_env(prefix, list(REQUIREMENTS), log)
        compile_tree(prefix / "bin" / "python", prefix / "lib")  # what pip installed (copies came with bytecode)
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(prefix)], check=True)
        stamp.write_text(key + "\n")
        log(f"shared environment ready in {time.monotonic() - started:.0f} s")
    stamp.touch()  # current: a course folder's make takes an environment older than its requirements.txt as stale
    # the course package as it is now (a copy: every user reads it; the instructor's folder stays closed)
    site = prefix / "lib" / PY / "site-packages"
    for old in site.glob("attention_course*"):
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    shutil.copytree(ROOT / "attention_course", site / "attention_course",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    etc = prefix / "etc" / "jupyter"
    for role in ("student", "instructor"):
        shutil.copytree(DEPLOY / role, etc if role == "student" else prefix / "etc" / "jupyter-instructor",
                        dirs_exist_ok=True)
    # what was copied now readable by all (the rest was made so once, when the environment was built)
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(site / "attention_course"), str(prefix / "etc")], check=True)


# -- the class: users, folders, exchange ------------------------------------------------------------

@dataclass
class Class:
    """One class on one machine: what ``deploy/jupyterhub/jupyterhub_config.py`` reads (``class.json``)."""

    state: str                      # the class's folder: exchange/ (every user's) and hub/ (root's alone)
    env: str                        # the shared environment's prefix
    exchange: str                   # Exchange.root for everybody
    course: str                     # the instructor's course folder (in the instructor's home)
    instructor: str
    students: list[str]
    passwords: dict[str, str] = field(default_factory=dict)
    ip: str = "127.0.0.1"
    port: int = 8000
    hub_port: int = 0
    proxy_api_port: int = 0
    api_token: str = ""             # the class-admin service's token (the tests and scripts act through it)

    @property
    def private(self) -> Path:
        """The hub's own files (database, cookie secret, class.json with the admin token, log): root's alone."""
        return Path(self.state) / "hub"

    def save(self) -> Path:
        path = self.private / "class.json"
        path.write_text(json.dumps({k: v for k, v in asdict(self).items() if k != "passwords"}, indent=1))
        path.chmod(0o600)
        return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_exchange(root: Path, course_id: str, instructor: str) -> None:
    """The exchange as the course wants it before any student logs in: the root 1777 (every user's nbgrader may
    write there; nobody renames another's folder), the course's folder made now and owned by the instructor (no
    student can make it first and stop releases), ``inbound/`` 3733 (hand-ins in, not listable, sticky: nobody
    renames or removes another's), ``outbound/`` 0755 and ``feedback/`` 0711."""
    user = pwd.getpwnam(instructor)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o1777)
    course = root / course_id
    for folder, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o3733),
                         (course / "feedback", 0o711)):
        folder.mkdir(exist_ok=True)
        os.chown(folder, user.pw_uid, user.pw_gid)
        folder.chmod(mode)


def course_copy(dest: Path, instructor: str) -> None:
    """The instructor's course folder: the repository's tracked files and its release, owned by the instructor."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in tracked.decode().split("\0") if n and (ROOT / n).is_file()]
    names += [str(p.relative_to(ROOT)) for p in (ROOT / "release").rglob("*") if p.is_file()]
    for name in sorted(set(names)):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    user = pwd.getpwnam(instructor)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(dest)], check=True)


#: What the instructor's login shells run (her JupyterLab terminals, ssh): the shared environment first on PATH, and the
#: class's exchange, so that every command the docs give (make autograde, nbgrader ..., python -m ...) is the course's.
PROFILE = """
# Attention from Scratch (make hub): the course's shared environment and the class's exchange
export ATTENTION_ENV="{env}"
export PATH="$ATTENTION_ENV/bin:$PATH"
export NBGRADER_EXCHANGE_ROOT="{exchange}"
"""


def instructor_profile(instructor: str, env: Path, exchange: Path) -> None:
    """Add :data:`PROFILE` to the instructor's ``~/.profile`` (read by her login shells: a JupyterLab terminal is
    one, and so is an ssh session), as her own file."""
    user = pwd.getpwnam(instructor)
    profile = Path(user.pw_dir) / ".profile"
    with open(profile, "a", encoding="utf-8") as out:
        out.write(PROFILE.format(env=env, exchange=exchange))
    os.chown(profile, user.pw_uid, user.pw_gid)


def new_class(state: Path, students: list[str], instructor: str, env: Path = ENV_PREFIX, port: int = 8000,
              log=print) -> Class:
    """Users, course folder, exchange and hub settings of a trial class (root only). ``remove_class`` undoes it."""
    if state.exists() and any(state.iterdir()):
        raise UsageError(f"{state} is not empty: the class's folder is made here and removed when the hub stops")
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o711)  # every user passes through to exchange/; nobody lists it
    (state / "hub").mkdir(mode=0o700)
    passwords: dict[str, str] = {}
    try:
        shared_env(env, log=log)
        passwords = make_users([instructor, *students])
        course = Path("~" + instructor).expanduser() / COURSE_ID
        course_copy(course, instructor)
        exchange = state / "exchange"
        prepare_exchange(exchange, COURSE_ID, instructor)
        instructor_profile(instructor, env, exchange)
        (course / ".attention-env").write_text(f"{env}\n")  # her make finds it from any shell, cron's too
        shutil.chown(course / ".attention-env", instructor, instructor)  # (useradd --user-group: her own group)
        klass = Class(state=str(state), env=str(env), exchange=str(exchange), course=str(course),
                      instructor=instructor, students=list(students), passwords=passwords, port=port,
                      hub_port=free_port(), proxy_api_port=free_port(), api_token=secrets.token_hex(32))
        klass.save()
    except BaseException as exc:  # nothing half-made is left: no user, no home, no folder
        try:
            undo_users(list(passwords), exc)
        finally:
            shutil.rmtree(state, ignore_errors=True)
        raise
    return klass


def remove_class(klass: Class, save_to: Path | None = None, log=print) -> Path | None:
    """Remove the class's users, their homes and the class's folder. With ``save_to``, first copy the instructor's work
    out (:func:`save_work`, once her processes are gone) and say where; if that fails, her home is kept (her account is
    removed) and the line says so. Returns the folder the work went to, or None."""
    saved = None
    keep = set()
    if save_to is not None:
        subprocess.run(["pkill", "-KILL", "-u", klass.instructor], capture_output=True)  # nothing of hers writes on
        for _ in range(50):
            if subprocess.run(["pgrep", "-u", klass.instructor], capture_output=True).returncode != 0:
                break
            time.sleep(0.2)
        try:
            saved = save_work(klass, save_to)
            log(f"The instructor's work (gradebook, grades, feedback, hand-ins, settings, the service's log) is kept "
                f"in {saved}/ (root's; README.txt says what it holds).")
        except Exception as exc:  # her work is never removed unsaved
            keep.add(klass.instructor)
            log(f"The instructor's work could NOT be copied out ({type(exc).__name__}: {exc}): her home "
                f"{Path(klass.course).parent} is kept (her account is removed); copy what you need, then remove it.")
    try:
        remove_users([klass.instructor, *klass.students], keep_home=keep)
    finally:  # a user left (UsersNotRemoved names it) keeps nothing else of the class
        shutil.rmtree(klass.state, ignore_errors=True)
    return saved


def start_hub(klass: Class, log_file: Path | None = None) -> subprocess.Popen:
    """JupyterHub for ``klass`` with ``deploy/jupyterhub/jupyterhub_config.py``; returns once it answers."""
    env = {"PATH": f"{klass.env}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "ATTENTION_HUB_CLASS": str(klass.private / "class.json")}
    out = open(log_file or klass.private / "jupyterhub.log", "ab")
    proc = subprocess.Popen([f"{klass.env}/bin/jupyterhub", "-f", str(DEPLOY / "jupyterhub_config.py")],
                            cwd=klass.private, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterHub exited ({proc.returncode}); see {out.name}")
        try:
            urllib.request.urlopen(f"http://{klass.ip}:{klass.port}/hub/api", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.5)
    stop_hub(proc)
    raise RuntimeError(f"JupyterHub did not answer in 90 s; see {out.name}")


def stop_hub(proc: subprocess.Popen) -> None:
    """Stop the hub, its proxy and every server it spawned (its session's process group)."""
    stop_session(proc, 30)  # on SIGTERM the hub stops the servers it spawned and its proxy


def stop_session(proc: subprocess.Popen, wait: float) -> None:
    """SIGTERM to ``proc``, ``wait`` seconds for it to end, then SIGKILL to whatever is left of its session (started
    with ``start_new_session``)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

