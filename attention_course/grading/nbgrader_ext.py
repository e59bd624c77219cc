"""nbgrader preprocessors this course adds to the stock pipeline.

``ReleaseStarterCode``
    A master notebook may carry *starter code* that students receive as-is,
    bugs included, inside a solution cell::

        ### BEGIN STARTER
        # V = X @ W_q + b_q
        ### END STARTER

    In the master the lines are comments (the master runs the solution only).
    In the release they are uncommented; in the solutions they are dropped.

``HideHiddenTests``
    Feedback shows each grade cell's visible tests and the message of the
    first failed check, but neither hidden-test source nor a traceback
    (tracebacks quote the hidden lines they pass through).
"""

from __future__ import annotations

import re

from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, List

BEGIN_STARTER = "### BEGIN STARTER"
END_STARTER = "### END STARTER"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
HIDDEN_PLACEHOLDER = "# (hidden tests ran here; their source is not shown)"


def replace_blocks(source: str, begin: str, end: str, keep) -> str:
    """Replace every ``begin``/``end`` block of ``source``.

    ``keep(lines, indent)`` receives the lines strictly inside a block and the
    indentation of its ``begin`` line, and returns the lines to put in its
    place. Raises ``ValueError`` on an unclosed or nested block.
    """
    out, block, indent = [], None, ""
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped.startswith(begin):
            if block is not None:
                raise ValueError(f"nested '{begin}' block")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped.startswith(end):
            if block is None:
                raise ValueError(f"'{end}' without '{begin}'")
            out.extend(keep(block, indent))
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"'{begin}' block is not closed")
    return "\n".join(out)


def uncomment(lines: list[str], indent: str) -> list[str]:
    """Remove one level of ``# `` from each commented line of a starter block."""
    result = []
    for line in lines:
        body = line[len(indent):] if line.startswith(indent) else line.lstrip()
        if body.startswith("# "):
            body = body[2:]
        elif body.startswith("#"):
            body = body[1:]
        result.append(indent + body if body else "")
    return result


class ReleaseStarterCode(NbGraderPreprocessor):
    """Turn ``### BEGIN STARTER`` blocks into code (release) or drop them (solutions)."""

    keep = Bool(True, help="Uncomment starter blocks (release); if False, remove them (solutions).").tag(
        config=True
    )

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and BEGIN_STARTER in cell.source:
            cell.source = replace_blocks(
                cell.source, BEGIN_STARTER, END_STARTER, uncomment if self.keep else (lambda lines, indent: [])
            )
        return cell, resources


class DropStarterCode(ReleaseStarterCode):
    """The solutions' variant of :class:`ReleaseStarterCode`: starter blocks are removed."""

    keep = Bool(False).tag(config=True)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class HideHiddenTests(NbGraderPreprocessor):
    """Remove hidden-test source and tracebacks from grade cells before feedback is rendered."""

    # The HTML exporter hands this option to every preprocessor it runs.
    display_data_priority = List(["text/html", "image/png", "text/plain"]).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not utils.is_grade(cell):
            return cell, resources
        if BEGIN_HIDDEN in cell.source:
            cell.source = replace_blocks(
                cell.source, BEGIN_HIDDEN, END_HIDDEN, lambda lines, indent: [indent + HIDDEN_PLACEHOLDER]
            )
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                message = _ANSI.sub("", f"{output.get('ename', 'Error')}: {output.get('evalue', '')}")
                output["traceback"] = [message]
        return cell, resources
