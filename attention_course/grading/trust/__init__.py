"""The course's trust rules, all of them: what a hand-in may be, what of it the grader takes, and what may reach
a page or the gradebook.

Each rule is one function of this package, called as ``trust.<rule>``, and no other module decides it;
``ARCHITECTURE.md``'s trust ledger names each function and the test that attacks it. The confinement of the
processes that run a hand-in's code (sandbox, time and memory caps, the wire format) is machinery in its own
modules, listed in the ledger's second table.

Files (:mod:`.files`)
    :func:`inspect_handin` (hand-in files are data), :func:`kernel_files` (a kernel gets the hand-in's
    files and the release's, nothing else of the course), :func:`safe_copy` (copies never follow links),
    :func:`exchange_metadata` (the exchange's small files re-written from validated values), :func:`plain_id`
    (ids are plain names), :func:`display_name` (file names printed with control characters escaped).
Exchange (:mod:`.exchange`)
    :func:`inbound_entries` (collect takes a folder of ``inbound/`` only from the Unix user of the id it claims,
    at the time the grader can trust, never dated in the future), :func:`refusals` (what it refused, for the
    grade table), :func:`handed_in_time` (a hand-in copied in by hand: its notebooks' own time).
Notebooks (:mod:`.notebook`)
    :func:`rebuilt_cells` (cells, roles, points, locked sources and order come from the gradebook and the
    master), :func:`student_names` (what the judge may take from a kernel), :func:`notebook_globals` (the notebook's
    variables a student's function is called without), :func:`changed_in_place` (a
    function that changes its argument fails the check), :func:`capped_grade` (grades within the cell's points),
    :func:`tests_as_in_source` (a hand-in is graded only with the master's tests and points).
Pages (:mod:`.pages`)
    :func:`inert_outputs` (outputs as text and raster images), :func:`execution_count` (a cell's count as
    nbformat takes it), :func:`inert_markdown_cell` (attachments as raster images), :func:`clean_html` and
    :func:`clean_markdown_html` (HTML from a student's text through an allow-list), :func:`shown_failure` (a failed
    hidden check quotes nothing the student's code produced).
"""

from .exchange import (
                    Inbound,
                    handed_in_time,
                    inbound_entries,
                    inbound_view,
                    login_of,
                    logins_table,
                    record_refusals,
                    redated_note,
                    refusals,
                    secret_owners,
                    take_inbound,
                    trusted_timestamp,
)
from .files import (
                    IGNORED,
                    MAX_FILE_BYTES,
                    MAX_HANDIN_BYTES,
                    Handin,
                    display_name,
                    exchange_metadata,
                    inspect_handin,
                    kernel_files,
                    plain_id,
                    read_small,
                    safe_copy,
                    submitted,
                    write_exchange_metadata,
)
from .notebook import (
                    EXTRA_CREDIT_SHARE,
                    capped_grade,
                    changed_in_place,
                    master_order,
                    master_signatures,
                    notebook_globals,
                    rebuilt_cells,
                    student_names,
                    tests_as_in_source,
)
from .pages import (GRADER_NOTE, RASTER, clean_html, clean_markdown_html, execution_count, inert_attachments,
                    inert_markdown_cell, inert_outputs, shown_failure)

__all__ = ["IGNORED", "MAX_FILE_BYTES", "MAX_HANDIN_BYTES", "Handin", "display_name", "exchange_metadata",
           "inspect_handin", "kernel_files", "handed_in_time", "inbound_entries", "logins_table", "record_refusals", "refusals",
           "Inbound", "inbound_view", "login_of", "redated_note", "secret_owners", "take_inbound",
           "trusted_timestamp", "plain_id", "read_small", "safe_copy", "submitted", "write_exchange_metadata",
           "EXTRA_CREDIT_SHARE", "capped_grade", "changed_in_place", "master_order", "master_signatures", "notebook_globals",
           "rebuilt_cells", "student_names",
           "tests_as_in_source",
           "GRADER_NOTE", "RASTER", "clean_html", "clean_markdown_html", "execution_count", "inert_attachments", "inert_markdown_cell",
           "inert_outputs", "shown_failure"]
