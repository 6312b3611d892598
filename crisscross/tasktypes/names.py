"""The papers' six task types by name, and their answers: for tests and benchmarks that write tables
by hand.  The library asks the registry instead (``task_type(name)``), never these names in a branch."""

from crisscross.tasktypes import choose, sis, sits, sts, verify, verify_triple
from crisscross.tasktypes.choose import NONE as CHOOSE_NONE
from crisscross.tasktypes.verify import ANSWERS as VERIFY_ANSWERS
from crisscross.tasktypes.verify_triple import ANSWERS as TRIPLE_ANSWERS
from crisscross.tasktypes.verify_triple import DECOY as TRIPLE_DECOY
from crisscross.tasktypes.verify_triple import TARGET as TRIPLE_TARGET
from crisscross.tasktypes.verify_triple import VERIFIERS as TRIPLE_VERIFIERS
from crisscross.tasktypes.verify_triple import decoy_first

STS, SIS, SITS, VERIFY = sts.STS.name, sis.SIS.name, sits.SITS.name, verify.VERIFY.name
CHOOSE, VERIFY_TRIPLE = choose.CHOOSE.name, verify_triple.VERIFY_TRIPLE.name
_SIX = (sts.STS, sis.SIS, sits.SITS, verify.VERIFY, choose.CHOOSE, verify_triple.VERIFY_TRIPLE)
TASK_TYPES = tuple(kind.name for kind in _SIX)
RATING_TYPES = tuple(kind.name for kind in _SIX if kind.scale is not None)
BISON_TYPES = (CHOOSE, VERIFY_TRIPLE)
POSITIVE_THRESHOLDS = {kind.name: kind.scale.threshold for kind in _SIX if kind.scale is not None}
VERIFY_POSITIVE = verify.VERIFY.positive_answers

__all__ = [
    "BISON_TYPES",
    "CHOOSE",
    "CHOOSE_NONE",
    "POSITIVE_THRESHOLDS",
    "RATING_TYPES",
    "SIS",
    "SITS",
    "STS",
    "TASK_TYPES",
    "TRIPLE_ANSWERS",
    "TRIPLE_DECOY",
    "TRIPLE_TARGET",
    "TRIPLE_VERIFIERS",
    "VERIFY",
    "VERIFY_ANSWERS",
    "VERIFY_POSITIVE",
    "VERIFY_TRIPLE",
    "decoy_first",
]
