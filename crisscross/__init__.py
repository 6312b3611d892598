"""crisscross: graded intra- and inter-modal similarity datasets over images and captions."""

__version__ = "0.1.0"
