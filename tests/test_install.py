"""``make install`` (tools/install_env.py): whole or not at all, and a failure said in one line that names the package
and the Python. The figures of a real install are the fresh-clone run's (``.ci/run`` installs with Debian's
``/usr/bin/python3.11``, 3.11.2); here, what pip says is read into that line, and a pin that needs a later Python
is tried for real in a scratch folder (PyPI's answer; no package is installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attention_course.grading.course import ROOT


def _script():
    """tools/install_env.py, a script the base Python runs with its standard library only (not imported as tools.*)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("install_env", ROOT / "tools" / "install_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


install_env = _script()

SOUPSIEVE = """ERROR: Ignored the following versions that require a different python version: 3.0.2 Requires-Python >=3.11.5; 4.1.2 Requires-Python >=3.11.5
ERROR: Could not find a version that satisfies the requirement soupsieve==4.1.2 (from versions: 2.8, 3.0.1)
ERROR: No matching distribution found for soupsieve==4.1.2
"""


def test_pips_refusal_becomes_one_line_naming_the_package_and_the_python_it_needs():
    assert install_env.why_pip_failed(SOUPSIEVE) == "soupsieve==4.1.2 needs Python >=3.11.5"
    assert install_env.why_pip_failed("ERROR: No matching distribution found for torch==9.9\n") == \
        "torch==9.9: pip found no file of it for this Python and machine"
    assert install_env.why_pip_failed("ERROR: Package 'x' requires a different Python: 3.11.2 not in '>=3.12'\n") == \
        "x requires Python '>=3.12'"
    assert install_env.why_pip_failed("Collecting y\nERROR: HTTP error 503 while getting ...\n") == \
        "HTTP error 503 while getting ..."


def test_the_torch_line_for_this_machine_and_the_rest(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text('# a comment\nnumpy==2.4.6\ntorch==2.13.0+cpu ; sys_platform != "darwin"\n'
                   'torch==2.13.0 ; sys_platform == "darwin"\n')
    rest, torch = install_env.torch_pin(req)
    assert rest == ["numpy==2.4.6"]
    assert torch == ("torch==2.13.0" if sys.platform == "darwin" else "torch==2.13.0+cpu")
    assert install_env.marker_holds('sys_platform == "linux" or sys_platform == "win32"') == (sys.platform in ("linux", "win32"))
    with pytest.raises(SystemExit):
        install_env.marker_holds("__import__('os').system('true')")


def test_the_course_pins_torch_per_machine_and_nothing_needs_a_later_python():
    text = (ROOT / "requirements.txt").read_text()
    assert 'torch==2.13.0+cpu ; sys_platform != "darwin"' in text and 'torch==2.13.0 ; sys_platform == "darwin"' in text
    assert "soupsieve==4.1.2" not in text  # needs 3.11.5: Debian 12's 3.11.2 could not install the list


@pytest.mark.slow
def test_a_failed_install_leaves_no_environment_and_says_why_in_one_line(tmp_path):
    python = Path("/usr/bin/python3.11")
    if not python.exists() or subprocess.run([str(python), "-c", "import ensurepip"]).returncode:
        pytest.skip("no Debian python3.11 with venv here (.ci/run installs it)")
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "install_env.py", tmp_path / "tools")
    (tmp_path / "requirements.txt").write_text("soupsieve==4.1.2\n")  # needs Python >= 3.11.5
    run = subprocess.run([str(python), str(tmp_path / "tools" / "install_env.py"), str(tmp_path / ".venv")],
                         capture_output=True, text=True, timeout=300)
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    if tuple(map(int, version.split("."))) >= (3, 11, 5):
        pytest.skip(f"this machine's python3.11 is {version}: the pin installs")
    assert run.returncode == 1 and not (tmp_path / ".venv").exists(), run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "soupsieve==4.1.2 needs Python >=3.11.5" in lines[0], lines
    assert f"Python {version} ({python})" in lines[0] and ".venv removed" in lines[0], lines
    assert "No matching distribution" in (tmp_path / ".install.log").read_text()


def test_an_index_out_of_reach_is_said_to_be_the_network():
    said = ("WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError(...: Failed to establish "
            "a new connection: [Errno -2] Name or service not known')': /simple/numpy/\n"
            "ERROR: Could not find a version that satisfies the requirement numpy==2.4.6 (from versions: none)\n"
            "ERROR: No matching distribution found for numpy==2.4.6\n")
    assert install_env.why_pip_failed(said).startswith("numpy==2.4.6: pip could not reach the package index")
