"""The shared vocabulary and the published file formats every phase reads and writes.

``schema`` (task types, the tasks and judgments tables, thresholds, item ids), ``cxc`` (the
Crisscrossed Captions release files: spec, reader with its validation, writer), ``eccv`` (the two
retrieval directions and ECCV Caption's positives files), ``verify`` (the VERIFY round's CSV
layout), ``manifest`` (a release folder's ``SHA256SUMS``, counts in ``release.json``, ``verify``),
``plan`` (a campaign plan's ``plan.json``: its designs and pilot spreads).
They sit below the phases (ARCHITECTURE.md, "Layers"), so sampling, evaluation, replay and the
release read one definition.
"""
