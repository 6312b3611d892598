"""A PyTorch ``Dataset`` over a release's rated pairs, for evaluation loops: each item is a pair
with its two sides as a model takes them (a caption's text, an image's pixels) and its score.

A release names captions and images by id and does not carry the pixels (the images keep their
own licences), so the user gives the images folder.  Caption texts and image file names come from
the release's own ``data/dataset_coco_cxc.json`` (Karpathy's ``dataset_coco.json`` shape, which
the release writes for COCO collections with SITS pairs): the one file of the release that holds
both, and the one a CxC user already reads.  A release without it is refused, saying so.  Every
side is located when the dataset is made, so a missing caption text or image file fails at once
(with its id and path), not an hour into an evaluation; pixels are decoded when an item is read,
under the project's pixel limit (``core.images``), from a path that must stay inside the images
folder (``core.io.confined``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from crisscross.core.errors import InputError
from crisscross.core.ids import CAPTION_KIND, IMAGE_KIND, split_id
from crisscross.core.images import UnreadableImageError, load_rgb
from crisscross.core.io import confined
from crisscross.formats.manifest import DATA, MERGED
from crisscross.release.load import load_release
from crisscross.release.merge import karpathy_names

PAIR_COLUMNS = ("item_id", "task_type", "id_a", "id_b", "agg_score", "positive")


def image_tensor(path: Path) -> torch.Tensor:
    """The image as a ``uint8`` tensor C×H×W (RGB, upright), as ``torchvision.io.read_image`` gives it."""
    return torch.from_numpy(np.array(load_rgb(str(path)).transpose(2, 0, 1), order="C"))  # a writable copy: torch refuses read-only memory


class PairDataset(Dataset):
    """The rated pairs of one table of a release (``pairs``, ``sts_test``, ``sits_test``, …).

    ``dataset[i]`` is a dict: ``item_id``, ``task_type``, ``a`` and ``b`` (a caption as its text, an
    image as a ``uint8`` C×H×W tensor read from ``images``, or what ``transform`` makes of it),
    ``score`` (the aggregated 0–5 score, NaN for answered types such as VERIFY) and ``positive``.
    ``images`` is the folder that holds the files themselves (for COCO's own layout, its ``val2014/``).
    A per-type table (``sts_test``, ``sits_test``) gives items of one shape, which ``DataLoader``'s
    default collation stacks; ``pairs`` mixes texts and images, so give it a ``collate_fn``.
    """

    def __init__(
        self, release: str | Path, images: str | Path, table: str = "pairs", transform: Callable[[torch.Tensor], Any] | None = None
    ) -> None:
        loaded = load_release(release)
        if table not in loaded.tables or not set(PAIR_COLUMNS) <= set(loaded.tables[table].column_names):
            pairs = sorted(k for k, t in loaded.tables.items() if set(PAIR_COLUMNS) <= set(t.column_names))
            raise InputError(f"{loaded.path} has no table of pairs named {table!r}; its tables of pairs: {', '.join(pairs) or 'none'}")
        self.images = Path(images)
        if not self.images.is_dir():
            raise InputError(f"images folder {self.images} is not a folder: give the folder that holds the release's image files")
        self.rows = loaded.tables[table].select(list(PAIR_COLUMNS)).to_pylist()
        self.transform = transform
        merged = loaded.path / DATA / MERGED
        if not merged.is_file():
            raise InputError(
                f"{loaded.path} has no {DATA}/{MERGED}, which names its captions' texts and images' files (COCO ids with SITS pairs)"
            )
        texts, files = karpathy_names(json.loads(merged.read_text(encoding="utf-8")))
        self.texts: dict[str, str] = {}
        self.paths: dict[str, Path] = {}
        for row in self.rows:
            for side in (row["id_a"], row["id_b"]):
                self._locate(side, texts, files, merged)

    def _locate(self, side: str, texts: dict[str, str], files: dict[str, str], merged: Path) -> None:
        """Keep a caption's text or an image's confined path; refuse a side the release cannot name or find."""
        kind = split_id(side)[1]
        if kind == CAPTION_KIND and side not in self.texts:
            if side not in texts:
                raise InputError(f"caption {side} has no text in {merged}")
            self.texts[side] = texts[side]
        elif kind == IMAGE_KIND and side not in self.paths:
            if side not in files:
                raise InputError(f"image {side} has no file name in {merged}")
            path = self.images / files[side]
            found = confined(str(path), str(self.images))
            if found is None:
                raise InputError(f"image {side}: {path} is not a file inside the images folder {self.images}")
            self.paths[side] = found

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        score = row["agg_score"]
        return {
            "item_id": row["item_id"],
            "task_type": row["task_type"],
            "a": self._side(row["id_a"]),
            "b": self._side(row["id_b"]),
            "score": float("nan") if score is None else float(score),
            "positive": bool(row["positive"]),
        }

    def _side(self, side: str) -> Any:
        if side in self.texts:
            return self.texts[side]
        try:
            tensor = image_tensor(self.paths[side])
        except UnreadableImageError as error:
            raise InputError(f"image {side}: {error}") from error
        return tensor if self.transform is None else self.transform(tensor)
