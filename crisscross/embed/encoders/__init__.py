"""Encoders by name: importing this package registers every text and image encoder."""

from crisscross.embed.encoders import image, precomputed, text  # noqa: F401  (registers them)
from crisscross.embed.encoders.base import IMAGE, IMAGE_ENCODERS, TEXT, TEXT_ENCODERS, Encoder, EncoderError

__all__ = ["IMAGE", "IMAGE_ENCODERS", "TEXT", "TEXT_ENCODERS", "Encoder", "EncoderError"]
