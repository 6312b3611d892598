"""Embed phase: encoders by name, embedding sets on disk, co-caption means."""

# The encoders a build uses unless its params say otherwise (the CxC paper's USE and GloVe BoW
# text spaces, and an ImageNet image encoder for S^V); every stage that names encoders starts here.
DEFAULT_TEXT_ENCODERS = ("use-m3", "bow-glove50")
DEFAULT_IMAGE_ENCODERS = ("efficientnet-lite0",)
