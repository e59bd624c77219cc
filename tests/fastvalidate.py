"""Validate as students run it, for many notebooks in one process.

nbgrader's own ``Validator`` (the Validate button, ``nbgrader validate``) decides, with the course's
configuration (stderr ignored, lines kept whole); only its ``Execute`` step is replaced by
:class:`KernelExecute`, which runs every cell in one kernel of the course's fork server (imports done) instead
of starting a new Python with PyTorch for every notebook, and draws no figure into a PNG that nobody will see
(Validate's verdict reads the test cells only; figures are still made and shown, as text). A real ``nbgrader
validate`` takes about 8 s of CPU per notebook; this takes the notebook's own run time. ``test_release.py``
checks that both say the same.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nbformat import current_nbformat, reads
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets.config import Config, PyFileConfigLoader

from attention_course.grading.judging.executor import JudgedExecute
from attention_course.grading.kernels.kernel import Kernel

SUCCESS = "Success! Your notebook passes all the tests."
FAILED = "VALIDATION FAILED"


class KernelExecute(NbGraderPreprocessor):
    """nbgrader's ``Execute`` for Validate: every code cell in order, in one kernel, errors kept as outputs."""

    def preprocess(self, nb, resources):
        settings = dict(JudgedExecute(parent=self).settings(), execution="validate")
        kernel = Kernel(settings, logging.getLogger("validate"))
        try:
            kernel.run("%config InlineBackend.figure_formats = set()", settings["startup_timeout"])
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                if not kernel.alive():
                    cell.outputs = []
                    continue
                cell.outputs, _, cell.execution_count = kernel.run(cell.source, settings["startup_timeout"])
        finally:
            kernel.close()
        return nb, resources


def course_config(course: Path) -> Config:
    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()


def validate(course: Path, notebook: dict | str) -> str:
    """What Validate says about ``notebook`` (a notebook, or its JSON text) in the course ``course``: "Success!…"
    or "VALIDATION FAILED…" followed by every failing cell's error, as nbgrader words it."""
    return validate_cells(course, notebook)[0]


def validate_cells(course: Path, notebook: dict | str) -> tuple[str, dict[str, str]]:
    """:func:`validate`'s verdict, and the failing grade cells: grade id -> that cell's part of the verdict."""
    import json

    from nbgrader.validator import Validator

    validator = Validator(config=course_config(course))
    validator.preprocessors = [KernelExecute if issubclass(step, Execute) else step for step in validator.preprocessors]
    nb = reads(notebook if isinstance(notebook, str) else json.dumps(notebook), as_version=current_nbformat)
    if validator._get_type_changed_cells(nb):
        return f"{FAILED}: THE TYPES OF CELLS HAVE CHANGED", {}
    resources = {}  # Validator._preprocess without its os.environ changes (not safe in threads; the kernel
    for step in validator.preprocessors:  # gets NBGRADER_EXECUTION=validate from KernelExecute)
        nb, resources = step(parent=validator).preprocess(nb, resources)
    changed = [] if validator.ignore_checksums else validator._get_changed_cells(nb)
    failed = validator._get_failed_cells(nb)
    if changed:
        return f"{FAILED}: {len(changed)} locked cell(s) changed", {}
    said = {cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {i}"):
            f"{cell.source.strip()[:200]}\n{validator._extract_error(cell)}" for i, cell in enumerate(failed)}
    if failed:
        return "\n".join([f"{FAILED} ON {len(failed)} CELL(S)!", *said.values()]), said
    return SUCCESS, {}


def validate_many(course: Path, notebooks: dict, workers: int = 2, cells: bool = False) -> dict:
    """:func:`validate` for each of ``notebooks`` (name -> notebook), ``workers`` at a time (:func:`validate_cells`
    with ``cells``)."""
    names = list(notebooks)
    check = validate_cells if cells else validate
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(names, pool.map(lambda n: check(course, notebooks[n]), names)))
