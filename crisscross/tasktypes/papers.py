"""How the papers' pairs were sampled, in the words of a release card: one paragraph the types of
a paper share (CxC and ECCV Caption's four, COCO-BISON's two)."""

CXC_SAMPLING = (
    "Candidate pairs were sampled as Crisscrossed Captions (CxC) did — `i2i_csim` image pairs from caption similarity, "
    "`c2c_isim` caption pairs from image similarity, `c2c_cocaption` pairs of captions of one image — then derived "
    "caption–image pairs (`c2i_intrasim`, `c2i_original`) were rated in a second round, and machine-annotator candidates "
    "were verified as in ECCV Caption. Sampling methods and their counts are in the table above."
)
BISON_SAMPLING = (
    "CHOOSE and VERIFY-TRIPLE are COCO-BISON's annotation rounds (Hu et al. 2019 §4.1): each image's nearest other image "
    "(`bison_decoy`) was shown with it and a rater chose a caption telling them apart; other raters then verified each "
    "chosen caption with both images (`bison_chosen`)."
)
