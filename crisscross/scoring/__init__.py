"""Models scored against ground truths, shared by every phase that ranks with a model.

``models`` (``MODEL_SOURCES``: the embedded encoders and score files as models; galleries),
``protocol`` (scoring a model against a truth: retrieval in query blocks, correlation, PMRP,
BISON), ``truths`` (``GROUND_TRUTHS``: COCO, CxC and ECCV-shaped positives), ``retrieval`` (pure
vectorised retrieval metrics: ranks, R@K, mAP@R, R-Precision, PMRP) and ``paired`` (correlation,
BISON accuracy, precision and recall).  The machine annotators (candidates), the
annotators' bias audit (aggregate) and the evaluate stage all use them, so they live below all
three.
"""
