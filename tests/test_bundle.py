"""The student bundle (``make student-bundle``), installed as a student installs it: an ordinary Unix user, the
distribution's Python (Debian 12's ``/usr/bin/python3.11``), and the README's Linux commands, read out of the README
and run as written. Then nbgrader's Validate, run from the student's home (not the bundle's folder: the course's
settings come with the installed package): Success on the solution while every core is busy (with the rest of
``make test``, or with loops started for it), and, with a PyTorch that does not import (a stand-in for PyPI's CUDA
build without its ``nvidia-*`` libraries), a first message that is the import error.

Where the packages come from is the one thing the test sets apart from a student's machine: pip reads no
configuration of this machine (``PIP_CONFIG_FILE=/dev/null``) and takes every file from a folder of wheels
(``PIP_NO_INDEX``, ``PIP_FIND_LINKS``) downloaded once per machine and per list of pins by ``pip download`` of the
same requirements, with the same extra index (``ATTENTION_STUDENT_WHEELS``, default
``/opt/attention-from-scratch/student-wheels``): the resolution, the unpacking, the build of ``./package`` and its
Jupyter settings are the student's own. Bytecode is left to the first import (``PIP_NO_COMPILE``): it would be a
minute of both cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fastvalidate import FAILED, SUCCESS
from harness import answered_notebook, masters, unix_users

from attention_course.grading.course import COURSE_ID, ROOT, available
from attention_course.grading.errors import UsageError
from attention_course.grading.deploy.bundle import NAME, TORCH_CPU_INDEX, notebook_imports, released_assignments, write_bundle
from attention_course.nbgrader_settings import CELL_TIMEOUT, IOPUB_TIMEOUT, STARTUP_TIMEOUT
from tools.submissions import read_notebook, solved_notebook, write_notebook

WHEELS = Path(os.environ.get("ATTENTION_STUDENT_WHEELS", "/opt/attention-from-scratch/student-wheels"))
DISTRIBUTION_PYTHON = Path("/usr/bin/python3.11")
A = available()[0]
#: A PyTorch that does not import, as PyPI's CUDA build installed without its nvidia-* packages fails.
BROKEN_TORCH = 'raise ImportError("libcudnn.so.9: cannot open shared object file: No such file or directory")\n'


def readme_commands(readme: str, system: str) -> list[str]:
    """The commands the README gives under ``<system>:`` (its indented block)."""
    block = readme.split(f"\n{system}", 1)[1].split(":\n\n", 1)[1]
    return [line[4:] for line in block.split("\n\n", 1)[0].splitlines() if line.startswith("    ")]


def wheelhouse(requirements: Path) -> Path:
    """Every file the bundle's install takes, downloaded once per list of pins (as root, readable by everybody)."""
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    folder = WHEELS / key
    if not (folder / ".complete").exists():
        scratch = WHEELS / f".{key}.{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        # the course's pip, with this machine's configuration (its own wheels); an index out of reach is skipped
        got = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                              "--dest", str(scratch), "--extra-index-url", TORCH_CPU_INDEX, "-r", str(requirements)],
                             capture_output=True, text=True, env={**os.environ, "PIP_RETRIES": "0"}, timeout=900)
        assert got.returncode == 0, got.stderr[-3000:]
        (scratch / ".complete").touch()
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(scratch, folder)
    for path in [WHEELS, folder]:
        path.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def student():
    """An ordinary Unix user (this process's own user where users cannot be made)."""
    with unix_users(f"attn-student-{os.getpid()}") as uids:
        yield pwd.getpwuid(uids[0] if uids else os.getuid())


def as_student(user, cmd: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    """``cmd`` in a shell of ``user``'s, with the distribution's PATH and nothing of the course's environment."""
    clean = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name, "PATH": "/usr/bin:/bin",
             "LANG": "C.UTF-8", "PIP_CONFIG_FILE": os.devnull, **env}
    prefix = ["runuser", "-u", user.pw_name, "--"] if os.geteuid() == 0 and user.pw_uid != 0 else []
    return subprocess.run([*prefix, "env", "-i", *[f"{k}={v}" for k, v in clean.items()], "bash", "-c", cmd],
                          cwd=cwd, capture_output=True, text=True, timeout=900)


def test_the_bundle_holds_the_released_assignments_or_those_named(tmp_path, monkeypatch):
    exchange = tmp_path / "exchange"
    monkeypatch.setenv("NBGRADER_EXCHANGE_ROOT", str(exchange))
    with pytest.raises(UsageError, match="No assignment is released"):
        write_bundle(ROOT, tmp_path / "none")
    second = available()[1]
    (exchange / COURSE_ID / "outbound" / second).mkdir(parents=True)
    assert released_assignments(ROOT) == [second]
    folder = write_bundle(ROOT, tmp_path / "released").with_suffix("")
    assert sorted(p.name for p in (folder / "assignments").iterdir()) == [second]
    assert f"`{second}`" in (folder / "README.md").read_text() and A not in (folder / "README.md").read_text()
    named = write_bundle(ROOT, tmp_path / "named", [A, second]).with_suffix("")
    assert sorted(p.name for p in (named / "assignments").iterdir()) == [A, second]
    assert len(list((write_bundle(ROOT, tmp_path / "all", ["all"]).with_suffix("") / "assignments").iterdir())) == len(available())
    for bad in ("99_nothing", "../source/" + A):
        with pytest.raises(UsageError, match="not in release/"):
            write_bundle(ROOT, tmp_path / "bad", [bad])


def test_a_student_installs_the_bundle_as_its_readme_says_and_validates(tmp_path, student):
    if not DISTRIBUTION_PYTHON.exists():
        pytest.skip("no /usr/bin/python3.11 (.ci/run installs Debian's)")
    archive = write_bundle(ROOT, tmp_path / "out", ["all"])
    readme = archive.with_suffix("").joinpath("README.md").read_text()
    shipped = {n for n in __import__("zipfile").ZipFile(archive).namelist()}
    assert not [p for p in shipped if "/grading/" in p or "catalogue" in p or "/source/" in p], shipped
    requirements = archive.with_suffix("").joinpath("requirements.txt").read_text()
    pins = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\[\]-]+==[\w.+]+( ; (sys_platform|os_name) [!=]= \"\w+\")?", p) for p in pins), pins
    assert 'torch==2.13.0+cpu ; sys_platform != "darwin"' in pins and 'torch==2.13.0 ; sys_platform == "darwin"' in pins
    names = {p.split("==")[0].lower() for p in pins}
    assert {"nbgrader", "jupyterlab", "numpy", "matplotlib", "seaborn"} <= names
    assert not names & {"dask", "distributed", "pytest", "playwright", "ruff", "copydetect", "jupyterhub"}, names
    wheels = wheelhouse(archive.with_suffix("") / "requirements.txt")

    home = Path(student.pw_dir) if student.pw_uid != os.getuid() else tmp_path / "home"
    home.mkdir(exist_ok=True)
    folder = home / NAME
    shutil.rmtree(folder, ignore_errors=True)
    shutil.unpack_archive(archive, home)
    notebook = next((folder / "assignments" / A).glob("*.ipynb"))
    solved = answered_notebook(read_notebook(notebook), solved_notebook(masters(A)[notebook.name]))
    write_notebook(solved, home / "work" / notebook.name)
    (home / "broken-torch").mkdir()
    (home / "broken-torch" / "torch.py").write_text(BROKEN_TORCH)
    subprocess.run(["chown", "-R", f"{student.pw_uid}:{student.pw_gid}", str(home)], check=True)

    install = readme_commands(readme, "Linux")
    assert install == ["python3.11 -m venv .venv",
                       f".venv/bin/python -m pip install --extra-index-url {TORCH_CPU_INDEX} -r requirements.txt ./package"]
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_NO_COMPILE": "1",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = as_student(student, " && ".join(install), folder, **offline)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    python = folder / ".venv" / "bin" / "python"
    imports = sorted(notebook_imports(list((folder / "assignments").rglob("*.ipynb"))) - {"attention_course"})
    every = as_student(student, f"{python} -c 'import {', '.join(imports)}'", home)
    assert every.returncode == 0, every.stderr[-2000:]  # what the notebooks import is installed
    facts = json.loads(as_student(student, f"{python} -c '{FACTS}'", home).stdout)
    assert facts["python"] == "3.11.2" or not str(DISTRIBUTION_PYTHON).startswith("/usr/bin"), facts
    assert facts["torch"] == "2.13.0+cpu" and facts["grading"] is None, facts
    assert facts["server"] == {"nbgrader.server_extensions.formgrader": False,
                               "nbgrader.server_extensions.assignment_list": False,
                               "nbgrader.server_extensions.course_list": False,
                               "nbgrader.server_extensions.validate_assignment": True}, facts
    assert {"@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:formgrader"} <= set(facts["lab_off"]), facts
    assert facts["validate"] == [STARTUP_TIMEOUT, IOPUB_TIMEOUT, CELL_TIMEOUT, 10000], facts  # the course's, from home

    def validate(path: Path, **env) -> str:
        run = as_student(student, f"{python} -m nbgrader validate {path}", home, **env)
        return re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(idle_cores())]
    try:  # every core kept busy while the solution is validated: by make test's other processes, or by loops
        loaded = validate(home / "work" / notebook.name)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert SUCCESS in loaded, loaded[-3000:]
    broken = validate(home / "work" / notebook.name, PYTHONPATH=str(home / "broken-torch"))
    assert FAILED in broken, broken[-2000:]
    first = broken.split("The error was:", 1)[1]
    assert first.lstrip().startswith("A cell of the course's above this check"), first[:1500]
    assert "ImportError: libcudnn.so.9" in first.split("The following cell failed", 1)[0], first[:3000]
    assert "NameError" not in first.split("The following cell failed", 1)[0], first[:3000]


def idle_cores() -> int:
    """The cores that nothing keeps busy now (one-minute load average): under ``make test`` its other processes keep
    both busy, and loops beside them would only take CPU from the rest of the suite; alone, one loop per core."""
    cores = os.cpu_count() or 2
    return max(0, cores - int(os.getloadavg()[0]))


FACTS = """
import json, platform, importlib.util, torch
from jupyter_core.paths import jupyter_config_path
from jupyter_server.extension.config import ExtensionConfigManager
from jupyterlab_server.config import get_static_page_config
from nbgrader.apps import NbGrader
server = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
app = NbGrader()
app.load_config_file()
ex = app.config.Execute
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__,
                  "grading": importlib.util.find_spec("attention_course.grading") and "found",
                  "server": {k: v for k, v in server.items() if k.startswith("nbgrader")},
                  "validate": [ex.startup_timeout, ex.iopub_timeout, ex.timeout, app.config.Validator.width],
                  "lab_off": sorted(k for k, v in get_static_page_config(level="all").get("disabledExtensions", {}).items() if v)}))
""".replace("'", '"')
