"""The card's YAML header for Hugging Face ``datasets``: every Parquet table of a release as a
config, so ``load_dataset("<release folder>", "<config>")`` loads it with typed features.

The Hub and a local ``load_dataset`` read the card's ``configs`` (the data files of each config
and split) and ``dataset_info`` (each config's features and split sizes), and cast the Parquet
columns to those features.  A per-split table ``<type>_<split>.parquet`` (``sts_test``) is config
``<type>`` with that split, as the Crisscrossed Captions files are split; every other table holds
all of the release's splits (``pairs``, ``judgments``, ``raters``, a part's ``bison/triples``) and
is config ``<folder>_<stem>`` (``bison_triples``, Croissant's record set name) with the one split
``full``: not ``train``, since nothing here is training data, and ``all`` is reserved by
``datasets``.  Features follow the Parquet types (ids and text strings, scores ``float64``, counts
``int64``, flags ``bool``; a column with no values is ``string``), and a label column
(``agg_label``, a judgment's ``answer``) is a ``class_label`` whose names are the fixed answers of
the task types the table holds, best first, when every answered type there has fixed answers
(CHOOSE's answers are the options of each item, so a table with CHOOSE keeps them as strings).
The header is written by a YAML dumper, never by joining strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from crisscross.formats.manifest import DATA
from crisscross.release.load import read_tables
from crisscross.tasktypes import task_type, type_names

# What the release declares for loaders, in its metadata fingerprint: a release built before (without
# it, or with another) differs in metadata, so the next build is a patch release that carries the new
# card header and record sets, not the previous release kept byte for byte.
LOADERS = "Hugging Face configs in the card's YAML header; Croissant record sets over the Parquet tables"
FULL = "full"  # the split of a table that holds every split of the release
LABEL_COLUMNS = ("agg_label", "answer")
# Arrow type → the type every loader declares: datasets' Value dtype, and Croissant's DataType of the same name
# (``float64`` → FLOAT64; ``string`` → TEXT); one table, so the two never disagree on a column.
DTYPES = {"string": "string", "large_string": "string", "null": "string", "double": "float64", "float": "float32", "bool": "bool"}
DTYPES.update({f"{sign}int{bits}": f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)})


SPLIT_NAME = re.compile(r"\w+(\.\w+)*")  # what datasets takes as a split's name; "all" it reserves
RESERVED_SPLITS = {"all"}


def config_of(key: str) -> tuple[str, str]:
    """A table's (config, split): ``sts_test`` → (``sts``, ``test``), ``bison/triples`` → (``bison_triples``, ``full``).
    A split ``datasets`` would refuse (``all``, the release's name for items without one; a source's
    ``test-dev``) keeps its table as a config of its own, ``sts_all`` with the split ``full``: one
    such name in the header would make every config fail to load."""
    kind, _, split = key.rpartition("_")
    if "/" not in key and kind in {name.lower() for name in type_names()} and SPLIT_NAME.fullmatch(split) and split not in RESERVED_SPLITS:
        return kind, split
    return key.replace("/", "_"), FULL


def label_names(table: pa.Table) -> list[str] | None:
    """The class names of the table's label columns: the fixed answers of its answered task types,
    in type order; ``None`` when it has no such type or one whose answers are per item."""
    if "task_type" not in table.column_names:
        return None
    kinds = [task_type(str(name)) for name in pc.unique(table.column("task_type")).to_pylist() if name is not None]
    answered = [kind for kind in kinds if not kind.rated]
    if not answered or any(not kind.answers for kind in answered):
        return None
    order = type_names()
    return list(dict.fromkeys(a for kind in sorted(answered, key=lambda k: order.index(k.name)) for a in kind.answers))


def features(table: pa.Table) -> list[dict[str, Any]]:
    """The Hub's feature list of a table: its columns' types, label columns as class labels."""
    names = label_names(table)
    found = []
    for column in table.schema:
        if column.name in LABEL_COLUMNS and names is not None:
            found.append({"name": column.name, "dtype": {"class_label": {"names": dict(enumerate(names))}}})
        else:
            found.append({"name": column.name, "dtype": DTYPES.get(str(column.type), "string")})
    return found


def hub_metadata(tables: Mapping[str, pa.Table]) -> dict[str, Any]:
    """``configs`` and ``dataset_info`` for tables keyed as :func:`crisscross.load_release` keys
    them (``sts_test``, ``bison/triples``); ``pairs`` is the default config when present.  A table
    without rows (no QC exclusions) is left out: ``load_dataset`` refuses a split with no data."""
    configs: dict[str, dict[str, str]] = {}
    for key in sorted(k for k, table in tables.items() if table.num_rows):  # datasets refuses a split with no rows
        config, split = config_of(key)
        configs.setdefault(config, {})[split] = key
    return {
        "configs": [
            {
                "config_name": config,
                "data_files": [{"split": split, "path": f"{DATA}/{key}.parquet"} for split, key in sorted(splits.items())],
                **({"default": True} if config == "pairs" else {}),
            }
            for config, splits in sorted(configs.items())
        ],
        "dataset_info": [
            {
                "config_name": config,
                "features": features(tables[next(iter(splits.values()))]),
                "splits": [
                    {"name": split, "num_bytes": tables[key].nbytes, "num_examples": tables[key].num_rows}
                    for split, key in sorted(splits.items())
                ],
            }
            for config, splits in sorted(configs.items())
        ],
    }


def front_matter(root: Path) -> str:
    """The YAML header (between ``---`` lines) for the Parquet tables under ``<root>/data``."""
    tables = read_tables(root / DATA)
    return "---\n" + yaml.safe_dump(hub_metadata(tables), sort_keys=False, allow_unicode=True, width=1000) + "---\n"
