"""The executed solutions as pages an instructor can post after the deadline (``make solutions-html``).

``nbgrader generate_solution`` (``make solutions``) writes ``solutions/<id>/<notebook>.ipynb``, executed, with the
visible tests only; :func:`write_pages` renders each into ``solutions/<id>/<notebook>.html`` with the course's
page template (``templates/course``: WCAG 2.1 AA, no script, formulas as MathML, every figure with the text
alternative its plotting code attached).
"""

from __future__ import annotations

from pathlib import Path

from traitlets.config import Config

from ..cells import without_solution_markers
from .mathml import TypesetMath
from .preprocessors import CODE_STYLE, TEMPLATES, PageExporter


def without_markers(nb, resources):
    """nbgrader's solution markers (``### BEGIN SOLUTION`` / ``### END SOLUTION``) taken out of every cell: the
    posted page shows the answer as a student would write it."""
    for cell in nb.cells:
        if cell.cell_type in ("code", "markdown"):
            cell.source = without_solution_markers(cell.source)
    return nb, resources


def exporter():
    """nbconvert's HTML exporter with the course's page template and formulas as MathML."""
    config = Config()
    config.HTMLExporter.extra_template_basedirs = [TEMPLATES]
    config.HTMLExporter.template_name = "course"
    config.HTMLExporter.preprocessors = [without_markers, TypesetMath]
    config.CSSHTMLHeaderPreprocessor.style = CODE_STYLE
    return PageExporter(config=config)


def write_pages(course: Path, assignments: list[str]) -> list[Path]:
    """Write ``solutions/<id>/<notebook>.html`` for every executed solution notebook; returns the pages."""
    html = exporter()
    written = []
    for assignment in assignments:
        for notebook in sorted((course / "solutions" / assignment).glob("*.ipynb")):
            body, _ = html.from_filename(str(notebook))
            page = notebook.with_suffix(".html")
            page.write_text(body, encoding="utf-8")
            written.append(page)
    return written
