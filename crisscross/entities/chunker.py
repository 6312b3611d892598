"""A deterministic noun-phrase chunker and mention typer for captions, from closed-class word lists.

Flickr30k Entities takes every NP chunk of a caption as a candidate mention, except personal
pronouns and a few frequent non-visual terms (§2.1).  No English tagger model is available
offline here, so this chunker knows the closed classes (determiners and numbers, prepositions,
conjunctions and relative words, auxiliaries, pronouns, adverbs and particles) and treats every
other word as content; a chunk is a run of content words after optional determiners, ended by
a closed-class word, punctuation or a verb.  Verbs are recognised by rules that suit captions:

* a word of ``VERBS`` (``sits``, ``holds``, ``sat``…) or a base form of ``BASE_VERBS`` (``sit``,
  ``play``) right after a noun ("two men *sit*"; after a determiner or adjective, "a long *walk*",
  it is a noun);
* an ``-ing`` / ``-ed`` word is a modifier inside a chunk only after a determiner, number or
  adjective and before a content word ("a *smiling* woman", "a *crowded* street"), a verb
  otherwise ("a man *riding* a bike", "a woman *dressed* in red");
* ``-ly`` words are adverbs.

``X of Y`` stays one chunk when ``X`` is a quantity or group noun ("a group of people", "a pair
of sunglasses"), as in the released annotations.  A chunk of adjectives alone ("is *happy*") is
not a noun phrase.  Types follow the paper's categories from the head (last word) through the
word lists below; a head in none of them is ``other``.

Measured on hand-labelled captions (tests/entities/test_chunker.py): all 88 mentions of the 22
captions the lists were written against; on 12 held-out captions precision 0.78 and recall 0.85
(verbs outside the lists, possessive phrases split at 's).  The paper's 3.2 mentions per caption
compare with 3.43 on the Karpathy Flickr30k test captions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


NUMBERS = _words("one two three four five six seven eight nine ten eleven twelve dozen hundreds dozens")
DETERMINERS = (
    _words("a an the this these those some many several few each every another both all his her their its my our your no any most lots")
    | NUMBERS
)
PREPOSITIONS = _words(
    "in on at with of near by for from into onto over under behind beside besides between through across along "
    "around against above below beneath inside outside toward towards to during without among amongst past atop "
    "upon like as off about underneath amid via beyond than within throughout front top next alongside before after "
    "until since such"
)
CONJUNCTIONS = _words("and or but nor so yet while because if then where when who which that whose whom what whilst")
AUXILIARIES = _words("is are was were be been being am has have had does do did can could will would should may might must 's")
PRONOUNS = _words("he she they it him them we i you us me himself herself themselves itself someone something one")
ADVERBS = _words(
    "not very just also together away back still there here almost really too out up down only even again ready "
    "about nearby closely alone apart currently well much"
)
CLOSED = PREPOSITIONS | CONJUNCTIONS | AUXILIARIES | ADVERBS
NON_VISUAL = _words("background foreground air midair distance")  # §2.1: frequent non-visual terms, no mention
GROUP_NOUNS = _words(
    "group groups set pair pairs couple bunch lot lots crowd pile herd flock team line row number piece pieces "
    "glass cup plate bowl slice slices bottle box stack variety kind type bag basket bouquet handful collection "
    "string throng"
)
ADJECTIVES = _words(
    "white black red blue green yellow orange pink purple brown gray grey dark light bright colorful large small "
    "big little tiny huge giant tall short long young old older elderly happy smiling wooden metal plastic empty "
    "full open closed clean dirty wet dry hot cold new other same different several many few asian african american "
    "blond blonde bald shirtless female male pretty beautiful busy crowded calm snowy sandy grassy rocky muddy "
    "sunny cloudy wide narrow high low multiple various double single middle-aged adult teenage fancy striped plaid "
    "cute furry fluffy sliced fresh fried baked cooked grilled frozen half covered main traditional "
    "professional"
)
VERBS = _words(
    "sits stands holds rides walks runs plays looks jumps lies lays waits wears carries eats drinks talks smiles "
    "watches throws kicks catches climbs swims sleeps works reads cooks poses leans hangs flies drives pulls pushes "
    "performs sings dances skates surfs skis crosses points goes gets takes makes shows uses sells cuts fixes "
    "prepares stares grabs lifts waves rests paints laughs kneels peers gazes appears seems contains includes "
    "features displays sat stood held rode wore ran lay laid took made got went came saw ate drank threw caught "
    "swam slept fell flew drove sang hung shown strewn worn thrown drawn"
)
BASE_VERBS = _words(
    "sit stand hold ride walk run play look jump lie lay wait wear carry eat drink talk smile watch throw kick "
    "catch climb swim sleep work read cook pose lean hang fly drive pull push perform sing dance skate surf ski "
    "cross point go get take make show use sell cut fix prepare stare grab lift wave rest paint laugh kneel gather "
    "relax enjoy compete chat break avoid score tag see help keep try attempt reach hit build give buy float paddle "
    "peer ascend attach bite splash dig pour serve feed hug kiss shake swing spray slide roll ride crawl march "
    "cheer clap celebrate race chase fish hike wander stroll browse shop pray fight wrestle box"
)
ING_NOUNS = _words("building buildings clothing ceiling painting paintings wedding morning evening thing things king ring string")
ED_NOUNS = _words("bed shed sled red bread head forehead sled hundred")

# Mention types (Flickr30k Entities' categories) by head noun; lists hold singular and plural forms.
TYPE_WORDS: dict[str, frozenset[str]] = {
    "people": _words(
        "man men woman women person people boy boys girl girls child children kid kids baby babies toddler toddlers guy "
        "guys lady ladies gentleman gentlemen adult adults teenager teenagers teen teens player players worker workers "
        "crowd family families couple couples team teams male males female females individual individuals rider riders "
        "skier skiers surfer surfers skateboarder skateboarders biker bikers cyclist cyclists runner runners dancer "
        "dancers musician musicians singer singers officer officers police policeman soldier soldiers student students "
        "tourist tourists spectators spectator audience fans fan chef chefs bride groom mother father son daughter "
        "brother sister friends friend group vendor vendors customer customers athlete athletes pitcher batter catcher "
        "umpire climber climbers swimmer swimmers performer performers artist artists someone doctor nurse waiter "
        "waitress cowboy cowboys infant youngster youngsters photographer photographers relatives members member "
        "instructor instructors"
    ),
    "clothing": _words(
        "shirt shirts t-shirt hat hats cap caps jacket jackets coat coats dress dresses pants jeans shorts skirt skirts "
        "suit suits uniform uniforms helmet helmets glasses sunglasses goggles shoes shoe boots boot sneakers sweater "
        "sweaters hoodie vest tie scarf gloves glove costume costumes outfit outfits top tank bikini swimsuit apron "
        "backpack jersey jerseys clothes clothing sweatshirt hood bandanna headband socks sandals mask wetsuit overalls "
        "robe gown wear"
    ),
    "bodyparts": _words(
        "hand hands hair face faces arm arms leg legs head heads eye eyes mouth foot feet finger fingers back shoulder "
        "shoulders knee knees beard mustache nose lap chest teeth tongue lips ear ears body fist neck tattoo tattoos "
        "toes belly hips wrist"
    ),
    "animals": _words(
        "dog dogs cat cats horse horses cow cows bird birds sheep elephant elephants giraffe giraffes zebra zebras bear "
        "bears puppy puppies animal animals duck ducks goat goats pig pigs chicken chickens bull bulls camel camels "
        "fish pigeon pigeons seagull seagulls kitten kittens pony ponies deer monkey monkeys lamb lambs cattle poodle "
        "dolphin"
    ),
    "vehicles": _words(
        "car cars truck trucks bus buses bike bikes bicycle bicycles motorcycle motorcycles boat boats train trains "
        "plane planes airplane airplanes jet vehicle vehicles van vans taxi cab tractor scooter scooters skateboard "
        "skateboards cart carts wagon canoe kayak ship ships subway trolley tram jeep suv helicopter sailboat raft "
        "stroller wheelchair"
    ),
    "instruments": _words(
        "guitar guitars drum drums piano violin cello bass saxophone trumpet trombone flute accordion harmonica banjo "
        "keyboard microphone instrument instruments clarinet tuba harp ukulele"
    ),
    "scene": _words(
        "street streets road roads park beach field fields grass water ocean sea lake river city town area room kitchen "
        "bathroom bedroom outside outdoors sidewalk snow mountain mountains hill hillside forest woods yard stage "
        "building market restaurant store shop crowd sky sand shore pool track court stadium highway intersection "
        "parking lot airport station downtown neighborhood countryside desert trail path playground office house home "
        "living dirt field ground floor alley village dock harbor waves wave corner"
    ),
}
TYPE_ORDER = ("people", "clothing", "bodyparts", "animals", "vehicles", "instruments", "scene")
OTHER = "other"
TYPES = (*TYPE_ORDER, OTHER)


@dataclass(frozen=True)
class Chunk:
    """Words ``[first, end)`` of a caption's whitespace tokens."""

    first: int
    end: int
    words: tuple[str, ...]

    @property
    def head(self) -> str:
        return self.words[-1].lower()


@dataclass(frozen=True)
class Chunking:
    chunks: tuple[Chunk, ...]
    skipped: tuple[tuple[str, str], ...]  # (reason, words): pronouns and non-visual terms the paper leaves out


def _is_word(token: str) -> bool:
    return any(ch.isalnum() for ch in token)


def _is_number(word: str) -> bool:
    return word in NUMBERS or word.isdigit()


NOUNS_AFTER_DETERMINER = _words("back top front inside outside side middle")  # closed-class words that are nouns after a determiner
QUANTIFIERS = _words("all both each")  # "all wearing helmets": a participle after these is a verb


def _modifier_slot(current: Sequence[str]) -> bool:
    """The open chunk so far ends with a determiner, number or adjective: a modifier may follow."""
    if not current:
        return False
    last = current[-1].lower()
    if last in QUANTIFIERS:
        return False
    return last in DETERMINERS or _is_number(last) or last in ADJECTIVES or _participle(last)


def _participle(word: str) -> bool:
    return (len(word) > 4 and word.endswith("ing") and word not in ING_NOUNS) or (
        len(word) > 3 and word.endswith("ed") and word not in ED_NOUNS
    )


def _content(token: str | None) -> bool:
    if token is None or not _is_word(token):
        return False
    word = token.lower()
    return word not in CLOSED and word not in DETERMINERS and word not in PRONOUNS and word not in VERBS


def _third_person(word: str) -> bool:
    """A third-person form of a known base verb ("floats", "tries", "watches")."""
    return any(form != word and form in BASE_VERBS for form in _singular(word))


def _known_noun(word: str) -> bool:
    return any(form in nouns for nouns in TYPE_WORDS.values() for form in _singular(word))


def _is_verb(word: str, current: Sequence[str], following: str | None, previous: str | None) -> bool:
    has_noun = bool(current) and not _modifier_slot(current) and current[-1].lower() not in QUANTIFIERS
    next_word = (following or "").lower()
    if word in VERBS:
        return has_noun or not current
    if word in BASE_VERBS or _third_person(word):
        return has_noun or previous == "to"
    if previous == "to" and (not following or next_word in DETERMINERS or next_word in CLOSED or next_word in PRONOUNS):
        return True  # an infinitive: "to avoid a player"
    if has_noun and word.endswith("s") and not word.endswith("ss") and next_word in DETERMINERS and not _is_number(next_word):
        return True  # "the catcher tags the player": a noun, then a word in -s, then a determiner
    if word.endswith("ly") and len(word) > 4 and word not in ("family", "fly", "belly", "jelly", "italy"):
        return True
    if _participle(word):
        if _modifier_slot(current) and _content(following):
            return False
        known_noun = _known_noun(next_word)
        opens_chunk = not current and previous in PREPOSITIONS  # "with *hiking* boots", "in *cuffed* jeans"
        compound = has_noun and word.endswith("ed")  # "a snow *covered* mountain"
        return not (known_noun and (opens_chunk or compound))
    return False


def chunk(words: Sequence[str]) -> Chunking:
    """Noun-phrase chunks of one caption's tokens (the caption split on whitespace)."""
    chunks: list[Chunk] = []
    skipped: list[tuple[str, str]] = []
    start = 0
    current: list[str] = []

    def close(end: int) -> None:
        nonlocal current
        content = [w for w in current if w.lower() not in DETERMINERS and not _is_number(w.lower())]
        if content and current[-1].lower() not in ADJECTIVES:
            if current[-1].lower() in NON_VISUAL:
                skipped.append(("non-visual", " ".join(current)))
            else:
                chunks.append(Chunk(start, end, tuple(current)))
        current = []

    for i, token in enumerate(words):
        word = token.lower()
        following = words[i + 1] if i + 1 < len(words) else None
        if not _is_word(token):
            close(i)
        elif word in PRONOUNS and not (word in NUMBERS and _content(following)):  # "one" before a noun is a number
            close(i)
            skipped.append(("pronoun", token))
        elif word == "of" and current and current[-1].lower() in GROUP_NOUNS and following is not None and _is_word(following):
            current.append(token)
        elif word == "and" and current and current[-1].lower() in ADJECTIVES and (following or "").lower() in ADJECTIVES:
            current.append(token)  # "a black and white dog"
        elif word in NOUNS_AFTER_DETERMINER and current and all(w.lower() in DETERMINERS for w in current):
            current.append(token)  # "her *back*", "the *top*"
        elif word in CLOSED:
            close(i)
        elif word in DETERMINERS or _is_number(word):
            if current and current[-1].lower() not in DETERMINERS and not _is_number(current[-1].lower()) and current[-1].lower() != "of":
                close(i)
            if not current:
                start = i
            current.append(token)
        elif _is_verb(word, current, following, words[i - 1].lower() if i else None):
            close(i)
        else:
            if not current:
                start = i
            current.append(token)
    close(len(words))
    return Chunking(tuple(chunks), tuple(skipped))


def _singular(word: str) -> tuple[str, ...]:
    forms = [word]
    if word.endswith("ies"):
        forms.append(word[:-3] + "y")
    if word.endswith("es"):
        forms.append(word[:-2])
    if word.endswith("s"):
        forms.append(word[:-1])
    return tuple(forms)


def mention_type(head: str) -> str:
    """The paper's category of a head noun, by the first list (in ``TYPE_ORDER``) that holds it."""
    forms = _singular(head.lower())
    for kind in TYPE_ORDER:
        if any(form in TYPE_WORDS[kind] for form in forms):
            return kind
    return OTHER
