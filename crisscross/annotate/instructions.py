"""What raters read: CxC's 0–5 criteria (appendix Table 2) per rating type, ECCV Caption's four
verification answers (§3.2), quoted from the papers, and BISON's two steps (§4.1, paraphrased: the
paper shows its interface only in the supplement), as one text per task type."""

from __future__ import annotations

from crisscross.formats.schema import (
    CHOOSE,
    CHOOSE_NONE,
    SCORE_MAX,
    SCORE_MIN,
    SIS,
    SITS,
    STS,
    TRIPLE_ANSWERS,
    VERIFY,
    VERIFY_ANSWERS,
    VERIFY_TRIPLE,
)

# CxC appendix, Table 2: the 0–5 criteria, STS column after Agirre et al. (2012); quoted
# (the PDF's stray spaces before commas removed).
RATING_CRITERIA: dict[str, dict[int, str]] = {
    STS: {
        5: "The texts are completely equivalent as they mean the same thing.",
        4: "The texts are mostly equivalent but some unimportant details differ.",
        3: "The texts are roughly equivalent but some important information differs or is missing.",
        2: "The texts are not equivalent but share some details.",
        1: "The texts are not equivalent but are on the same topic.",
        0: "The texts are on different topics.",
    },
    SIS: {
        5: "The scenes are near duplicates, possibly being viewed from a different perspective.",
        4: "The two scenes are mostly equivalent, but some unimportant details differ such as involving different but the same or highly similar types of participants, actions, objects and background.",
        3: "The two scenes are roughly equivalent, but some important details are different or missing such as involving a notable difference in the types of participants, actions, objects or background.",
        2: "The two scenes are not equivalent, but share some details in terms of the types of participants, actions, objects or background.",
        1: "The two scenes are not equivalent, but are loosely thematically related.",
        0: "The two scenes are completely dissimilar.",
    },
    SITS: {
        5: "The image and sentence are perfectly matched. The sentence is an almost perfect description for the image.",
        4: "The image and sentence are mostly matched, but some unimportant details differ such as involving different but the same or highly similar types of participants, actions, objects and background. The text can partially describe the image.",
        3: "The image and sentence are roughly matched, but some important details are different or missing such as involving a notable difference in the types of participants, actions, objects or background. The image cannot be described using the text.",
        2: "The image and sentence are not matched, but share some details in one or more of the types of participants, actions, objects or background.",
        1: "The image and sentence are not matched, but are loosely thematically related.",
        0: "The image and sentence are completely unmatched.",
    },
}

# CxC appendix, Figures 4–6 (the annotation interfaces): task statement, detailed instructions, tips.
_RATING_GUIDANCE: dict[str, str] = {
    STS: """\
For this task, you will compare two sentence length snippets of English text and rate how similar they are in meaning to each other.

Two snippets of text can mean the same thing even if they use very different words and phrases. Conversely, two texts that are superficially very similar in their word choice, phrasing and overall composition can have very different meanings.

For this task, you will compare two phrase or sentence length segments of text and select whether or not they have same underlying meaning or message in terms of what they refer to, say or ask about the world.

For example, do both snippets refer to the exact same person, action, event, idea or thing? Or are they similar but different according to either large or small details?

Tips
- Assign ratings according to the underlying meaning of the two snippets rather than their superficial similarities or differences.
- Be careful of wording differences that have an important impact on what is being said or described.
- Ignore grammatical errors and awkward wordings as long as they do not obscure what is being conveyed.
- Use the full range of scores and do not be concerned about selecting precise values such as (2.0) or (3.5).
- Be fast! Do not spend time obsessing over one numerical value versus another (e.g. a (1) vs a (2)) -- in such cases, pick a value somewhere between them and closer to the value you think represents their similarity.""",
    SIS: """\
Evaluate the 2 images and answer the question below.

For this task, you will compare two images and select whether or not they have the same underlying meaning in terms of what they refer to, say or ask about the world.

For example, do both images refer to the exact same person, action, event, idea or thing? Or are they similar but different according to either large or small visual details?

Tips
1. Assign ratings according to the underlying meaning and/or theme of the images and not only based on visual similarities or differences.
2. Use the full range of scores and do not be concerned about selecting precise values such as (2.0) or (3.5).
3. Be fast! Do not spend time obsessing over one numerical value versus another (e.g. a (1) vs a (2)) – in such cases, pick a value somewhere between them and closer to the value you think represents their similarity.""",
    SITS: """\
Compare the image and snippet of text to answer the question below.

For this task, you will compare an image and a snippet of text and select whether or not they have the same underlying meaning in terms of what they refer to, say or ask about the world.

For example, do both the image and the text snippet refer to the exact same person, action, event, idea or thing? Or are they similar but different according to either large or small details?

Tips
1. Assign ratings according to the underlying meaning and/or theme of the image and the text snippet and not only based on superficial similarities or differences.
2. Be careful of wording differences that have an important impact on what is being said or described.
3. Ignore grammatical errors and awkward wordings as long as they do not obscure what is being conveyed.
4. Use the full range of scores and do not be concerned about selecting precise values such as (2.0) or (3.5).
5. Be fast! Do not spend time obsessing over one numerical value versus another (e.g. a (1) vs a (2)) – in such cases, pick a value somewhere between them and closer to the value you think represents their similarity.""",
}

# ECCV Caption §3.2 names the four answers ("100% YES", "Partially YES, but", "Mostly NO,
# because", "100% NO") and counts the first two as positives (§3.3: "Yes" or "Weak Yes"); it
# gives no longer definitions, so the meanings below are this project's wording of those labels.
VERIFY_MEANINGS: dict[str, str] = dict(
    zip(
        VERIFY_ANSWERS,  # "100% yes", "partially yes", "mostly no", "100% no"
        (
            "The caption correctly describes the image.",
            "The caption describes the image, but some details are wrong or missing.",
            "The caption does not describe the image, although some details match.",
            "The caption has nothing to do with the image.",
        ),
        strict=True,
    )
)

_VERIFY_GUIDANCE = """\
Look at the image and read the caption: does the caption describe the image?

Choose one of four answers. There is no "not sure": if the caption is right but imprecise, choose "partially yes"; if it is wrong but shares something with the image, choose "mostly no"."""


# The question above the scale in the STS and SIS interfaces (the SITS interface asks none).
_RATING_QUESTION: dict[str, str] = {
    STS: "Are the following two snippets of text equivalent in meaning?",
    SIS: "Do you think the 2 images above are the same?",
    SITS: "",
}


def _rating_instructions(kind: str) -> str:
    """Guidance, question, the Table 2 scale, and the continuous-score rule (CxC §2: raters were
    encouraged to give scores like 1.3)."""
    scale = "\n".join(f"({score}) {text}" for score, text in sorted(RATING_CRITERIA[kind].items(), reverse=True))
    continuous = (
        f"Scores are continuous: give any value from {SCORE_MIN:g} to {SCORE_MAX:g}, such as 1.3 or 3.5, "
        "between the two descriptions that fit best."
    )
    question = f"{_RATING_QUESTION[kind]}\n\n" if _RATING_QUESTION[kind] else ""
    return f"{_RATING_GUIDANCE[kind]}\n\n{question}Scale\n{scale}\n\n{continuous}"


# BISON §4.1 step 2: pick the caption that fits the target image but not the decoy.
_CHOOSE_GUIDANCE = f"""\
You see two similar images, the target image and another image, and the captions written for the target.

Choose the one caption that describes the target image but does not describe the other image. If every caption fits both images, choose "{CHOOSE_NONE}" (none of the above)."""

# BISON §4.1 step 3: the four answers of the verification, in the paper's order.
TRIPLE_MEANINGS: dict[str, str] = dict(
    zip(
        TRIPLE_ANSWERS,  # "target", "decoy", "both", "neither"
        (
            "The caption describes the target image only.",
            "The caption describes the decoy image only.",
            "The caption describes both images.",
            "The caption describes neither image.",
        ),
        strict=True,
    )
)

_TRIPLE_GUIDANCE = """\
Read the caption and look at the two images: which of them does the caption describe?

Answer with the image the caption describes, "both" if it describes both images, or "neither" if it describes neither."""

INSTRUCTIONS: dict[str, str] = {
    **{kind: _rating_instructions(kind) for kind in (STS, SIS, SITS)},
    VERIFY: _VERIFY_GUIDANCE + "\n\nAnswers\n" + "\n".join(f"{a}: {m}" for a, m in VERIFY_MEANINGS.items()),
    CHOOSE: _CHOOSE_GUIDANCE,
    VERIFY_TRIPLE: _TRIPLE_GUIDANCE,
}
