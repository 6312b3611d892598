"""Versioned dataset releases built from the rated rounds and the workflows' outputs.

``contents`` (tables, pseudonymised raters), ``pseudonyms`` (keyed hashes), ``merge`` (CxC's
Karpathy merge), ``card`` (``README.md`` and plots), ``croissant`` (``croissant.json``), ``parts``
(COCO-BISON triples, Flickr30k Entities boxes and machine labels beside the rounds), ``labels``
(how the labels were obtained: replication per task type, the machine's share), ``versions``
(semantic versions, diffs, changelog), ``build`` (the whole release, staged and swapped in
atomically), ``load`` (``crisscross.load_release``); loaders for other libraries: ``hub`` (the
card's Hugging Face configs and features), ``pytorch`` (``PairDataset``).  The CxC files and the manifest are formats
(``crisscross.formats``).
"""
