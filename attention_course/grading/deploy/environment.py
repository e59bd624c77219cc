"""A new environment filled from the course's own: the hub's shared environment (``make hub-env``) and the student
bundle's test take every package the course's ``.venv`` holds at its pinned version from there (files as its
``RECORD`` lists them, each checked against the hash it gives, with the bytecode ``make install`` compiled), and
let pip install only the rest. Unpacking PyTorch and JupyterLab again, and compiling them, is otherwise a minute of
both cores on a fresh machine and proves nothing that ``make install`` did not.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .bundle import TORCH_CPU_INDEX, pins

#: The installed packages' own test suites (folders named ``tests``), which nothing of the course imports: a fifth of
#: an environment's source, never compiled (``make install``, the hub's shared environment). Not PyTorch's
#: ``testing/_internal``: ``import torch`` imports three of its modules.
NOT_COMPILED = r"/tests/"


def compile_tree(python: str | Path, folder: str | Path) -> None:
    """Bytecode for every module below ``folder`` but :data:`NOT_COMPILED`, on every core (pip compiles one file
    after another; a kernel that runs as a user of its own could not write it). A file that does not compile under
    this Python (one of PyTorch's is in 3.12 syntax) is left as it is, as pip leaves it."""
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", "-x", NOT_COMPILED, str(folder)],
                   capture_output=True)


def _prefix(site: Path) -> Path:
    """The environment whose site-packages is ``site`` (``<prefix>/lib/pythonX.Y/site-packages``)."""
    return Path(os.path.normpath(site.parents[2]))


def pinned_files(site: Path, wanted: dict[str, str]) -> dict[str, list[tuple[Path, str | None]]]:
    """Each pin of ``wanted`` (name -> "name==version", as :func:`bundle.pins` reads them) that the environment whose
    site-packages is ``site`` holds at a version the pin allows (``2.13.0+cpu`` for ``torch==2.13.0``): name -> its files
    as its ``RECORD`` lists them, relative to ``site`` (scripts and data files lie outside it:
    ``../../../bin/jupyter-lab``), each with the hash ``RECORD`` gives (``sha256=...``), and after each module the
    bytecode ``make install`` compiled for it, where there is some (hash None, as for ``RECORD`` itself). An entry
    that leads out of the environment (an absolute path, or above its prefix) is never listed."""
    prefix = _prefix(site)
    found = {}
    for dist in metadata.distributions(path=[str(site)]):
        name = canonicalize_name(dist.metadata["Name"])
        if name not in wanted or name in found or not Requirement(wanted[name]).specifier.contains(dist.version):
            continue
        files = []
        for entry in dist.files or ():
            rel = Path(str(entry))
            where = Path(os.path.normpath(site / rel))
            if rel.is_absolute() or not where.is_relative_to(prefix):
                continue
            files.append((rel, f"{entry.hash.mode}={entry.hash.value}" if entry.hash else None))
            if rel.suffix == ".py" and where.is_relative_to(site):
                compiled = Path(importlib.util.cache_from_source(str(rel)))
                if (site / compiled).is_file():
                    files.append((compiled, None))
        found[name] = list(dict.fromkeys(files))  # a RECORD may list the bytecode too
    return found


def _digest(path: Path, mode: str) -> str:
    with open(path, "rb") as f:
        raw = hashlib.file_digest(f, mode).digest()
    return f"{mode}={base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}"


def copy_installed(source: Path, dest: Path, wanted: dict[str, str]) -> list[str]:
    """Copy into ``dest`` (the site-packages of a new environment) every pin of ``wanted`` that the environment of
    site-packages ``source`` (the course's ``.venv``) holds at its version, file by file as its ``RECORD`` lists
    them (:func:`pinned_files`), so that pip, given the same list next, finds them installed and unpacks only the
    rest. A package is copied whole or not at all: not if ``dest`` has it already, and not if one of its files is
    missing or differs from the hash ``RECORD`` gives (pip installs it then, from the wheel). Each module's bytecode
    comes along with the module's time, so that Python takes it as current; a script in ``bin/`` that names the
    source's interpreter names ``dest``'s. Nothing is written outside ``dest``'s environment. Unpacking PyTorch,
    JupyterLab and the rest again was most of a shared environment's first build (about 35 core-seconds of
    pip, and 45 more to compile them); this is a copy. Returns the names copied."""
    present = {canonicalize_name(d.metadata["Name"]) for d in metadata.distributions(path=[str(dest)])}
    old_bin, new_bin = (f"{_prefix(site) / 'bin'}/" for site in (source, dest))
    copied = []
    for name, files in sorted(pinned_files(source, wanted).items()):
        if name in present or not all((source / rel).is_file() and (digest is None or _digest(
                source / rel, digest.split("=", 1)[0]) == digest) for rel, digest in files):
            continue
        made = set()
        for rel, _ in files:
            origin, target = source / rel, Path(os.path.normpath(dest / rel))
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            data = origin.read_bytes() if target.parent.name == "bin" and not target.is_relative_to(dest) else b""
            if data.startswith(b"#!"):  # pip's scripts: #!<prefix>/bin/python3.11, or /bin/sh then exec
                head, sep, rest = data.partition(b"\n")
                second, sep2, rest = rest.partition(b"\n")
                head, second = (line.replace(old_bin.encode(), new_bin.encode()) for line in (head, second))
                target.write_bytes(head + sep + second + sep2 + rest)
                shutil.copystat(origin, target)
            else:
                _link_or_copy(origin, target)
        copied.append(name)
    return copied


def _link_or_copy(origin: Path, target: Path) -> None:
    """A link costs nothing; a file of another owner, or on another file system, is copied."""
    if origin.stat().st_uid == os.geteuid():
        try:
            os.link(origin, target)
            return
        except OSError:
            pass
    shutil.copy2(origin, target)


def fill_env(prefix: Path, requirements: list[Path], log=print) -> list[str]:
    """Install the pins of ``requirements`` into the new environment at ``prefix`` (made ``--without-pip``): what the
    course's environment holds at those versions by :func:`copy_installed` (pip with it), the rest by pip from its
    wheels, as ``pip install --no-deps -r`` would. Returns the names copied."""
    wanted = {"pip": "pip", **{k: v for path in requirements for k, v in pins(path).items()}}
    copied = copy_installed(Path(sysconfig.get_path("purelib")),
                            prefix / Path(sysconfig.get_path("purelib", vars={"base": "."})), wanted)
    log(f"{len(copied)} of {len(wanted)} packages copied from the course's environment (same pins, files as their "
        f"RECORD says); pip installs the rest")
    python = str(prefix / "bin" / "python")
    if "pip" not in copied:
        subprocess.run([python, "-m", "ensurepip", "--default-pip"], check=True, capture_output=True)
    if len(copied) < len(wanted):
        # PyTorch's CPU build (+cpu) is on the PyTorch project's index, not on PyPI (but on macOS)
        index = ["--extra-index-url", TORCH_CPU_INDEX] if "torch" not in copied and sys.platform != "darwin" else []
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--no-compile", *index, *[a for path in requirements for a in ("-r", str(path))]], check=True)
    return copied
