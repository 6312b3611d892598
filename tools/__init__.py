"""Project scripts: the demo dataset builder, a COCO-size replica, DVC code deps (not shipped)."""
