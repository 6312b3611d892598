"""The worked examples above a batch (CxC appendix: "task-specific high-level instructions …
followed by a pair of examples"), each type's own (:meth:`crisscross.tasktypes.base.TaskType.examples`).

Image examples are drawn from the collection itself, never from a pair the round asks about, so
an example cannot give away an item's (or a gold item's) answer.
"""

from __future__ import annotations

from crisscross.annotate.catalog import Catalog
from crisscross.tasktypes import task_types
from crisscross.tasktypes.base import Example


def worked_examples(catalog: Catalog, asked_pairs: set[frozenset[str]], asked_ids: set[str]) -> dict[str, tuple[Example, ...]]:
    """Every type's examples that it has.  ``asked_pairs``: the round's pairs (no example may be
    one); ``asked_ids``: the ids in the round, avoided where the collection has others to show."""
    found = {kind.name: kind.examples(catalog, asked_pairs, asked_ids) for kind in task_types()}
    return {name: examples for name, examples in found.items() if examples}
