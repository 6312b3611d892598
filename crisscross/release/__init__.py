"""Releases: the CxC file format (``cxc``) and versioned dataset releases built from the rated rounds and workflows' outputs.

``contents`` (tables, pseudonymised raters), ``pseudonyms`` (keyed hashes), ``merge`` (CxC's
Karpathy merge), ``card`` (``README.md`` and plots), ``croissant`` (``croissant.json``),
``parts`` (COCO-BISON triples and Flickr30k Entities boxes beside the rounds),
``manifest`` (``SHA256SUMS``, counts, ``verify``), ``versions`` (semantic versions, diffs,
changelog), ``build`` (the whole release, staged and swapped in atomically), ``load``
(``crisscross.load_release``).
"""
