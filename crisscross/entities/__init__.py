"""Flickr30k Entities (Plummer et al., §2): mentions, cross-caption coreference chains and boxes.

``chunker`` (rule noun-phrase chunks and their types), ``mentions`` (the mentions table, checks),
``files`` (the released ``Sentences/*.txt`` and ``Annotations/*.xml``), ``oracle`` (the simulated
crowd and its truth), ``coref`` (O(|M|·|C|) link scheduling, chain verification), ``boxes`` (the
per-chain box state machine), ``merge`` (box and chain merging), ``labelstudio`` (box tasks out,
rectangles back), ``localize`` (phrase-localization metrics from scored proposals).
"""
