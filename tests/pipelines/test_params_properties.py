"""Properties of the params reader (Hypothesis): whatever a params file holds — random bytes or
text, YAML-ish token soup, structured documents with random sections, keys, nesting, repeated keys
and wrong types, the demo's params with a line written twice — reading it and a stage's section
gives settings or exactly one line (ParamError / InputError) naming the file; never a traceback."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from crisscross.aggregate.positives import PositivesSettings
from crisscross.aggregate.quality import QualityRules
from crisscross.aggregate.round import RoundSettings
from crisscross.annotate.sources import SimulateSettings
from crisscross.annotate.tasks import TaskParams
from crisscross.campaign.replication import ReplicationSettings
from crisscross.candidates.machine import FilterSettings
from crisscross.core.errors import InputError, ParamError
from crisscross.pipelines.annotate import AnnotateSettings
from crisscross.pipelines.ingest import IngestSettings
from crisscross.pipelines.similarity import SimilaritySettings
from crisscross.pipelines.stage import load_params, read_params
from crisscross.scoring.protocol import EvaluateSettings

PROJECT = Path(__file__).resolve().parents[2]


def examples(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, database=None, deadline=None)


STAGES = {
    "ingest": IngestSettings,
    "similarity": SimilaritySettings,
    "tasks": TaskParams,
    "annotate": AnnotateSettings,
    "aggregate": RoundSettings,
    "evaluate": EvaluateSettings,
    "filter": FilterSettings,
    "positives": PositivesSettings,
}
ROUNDS = ("sits", "adaptive")
MODEL_KEYS = ("source", "path", "text", "image", "gallery", "paht")
NESTED_KEYS = {  # the keys a nested mapping draws from: its own, and near misses
    "reader_options": ("split", "text", "columns", "namespace", "colums"),
    "backend_options": ("block", "threads", "m", "ef_search", "blok"),
    "gold_per_batch": ("positive", "negative", "positve"),
    "items_per_type": ("STS", "SIS", "VERIFY", "sts"),
    "thresholds": ("STS", "SIS", "SITS", "VERIFY"),
    "simulate": (*(f.name for f in fields(SimulateSettings)), "raters"),
    "replication": (*(f.name for f in fields(ReplicationSettings)), "alpa"),
    "rules": (*(f.name for f in fields(QualityRules)), "min_gold"),
    "rater_sd": ("STS", "SIS", "XYZ"),
    "anchors": ("STS", "CHOOSE", "XYZ"),
}
MODEL_MAPPINGS = ("models", "annotators", "audit_models")
UNSAFE_KEYS = ("on", "no", "1", "null", "~", "2026-01-01")  # YAML reads these as bool, int, None, date: never string keys
WORDS = ("table", "coco-karpathy-jsonl", "exact", "faiss-hnsw", "score-matrix", "embeddings", "threshold", "fixed", "STS", "use-m3")
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 50_000),
    st.integers(10**300, 10**310),
    st.floats(allow_nan=False),
    st.sampled_from(WORDS),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.lists(st.lists(SCALARS, max_size=2), max_size=2))


@dataclass(frozen=True)
class Block:
    """A mapping as written: its pairs in order, a key possibly twice."""

    pairs: tuple[tuple[str, Any], ...]

    def lines(self, indent: int = 0) -> list[str]:
        out = []
        for key, value in self.pairs:
            if isinstance(value, Block) and value.pairs:
                out += [f"{' ' * indent}{key}:", *value.lines(indent + 2)]
            else:  # JSON: a flow value on one line of printable ASCII
                shown = "{}" if isinstance(value, Block) else json.dumps(value).replace("\x7f", "\\u007f")
                out.append(f"{' ' * indent}{key}: {shown}")
        return out

    def walk(self) -> list[Block]:
        return [self, *(b for _, v in self.pairs if isinstance(v, Block) for b in v.walk())]

    def repeats_a_key(self) -> bool:
        return any(len({k for k, _ in b.pairs}) < len(b.pairs) for b in self.walk())

    def has_unsafe_key(self) -> bool:
        return any(k in UNSAFE_KEYS for b in self.walk() for k, _ in b.pairs)


def names(draw: st.DrawFn, known: tuple[str, ...], most: int = 4) -> list[str]:
    """Up to ``most`` keys of ``known``, now and then one written twice or one YAML does not read as a string."""
    chosen = draw(st.lists(st.sampled_from(known), unique=True, max_size=most))
    if chosen and not draw(st.integers(0, 29)):
        chosen.insert(draw(st.integers(0, len(chosen))), draw(st.sampled_from(chosen)))
    if not draw(st.integers(0, 59)):
        chosen.insert(draw(st.integers(0, len(chosen))), draw(st.sampled_from(UNSAFE_KEYS)))
    return chosen


@st.composite
def blocks(draw: st.DrawFn, known: tuple[str, ...], value: st.SearchStrategy[Any]) -> Block:
    return Block(tuple((name, draw(value)) for name in names(draw, known)))


@st.composite
def models(draw: st.DrawFn) -> Block:
    return Block(tuple((name, draw(blocks(MODEL_KEYS, st.one_of(st.sampled_from(WORDS), SCALARS)))) for name in names(draw, ("a", "b"), 2)))


@st.composite
def sections(draw: st.DrawFn, stage: str) -> Any:
    if stage not in STAGES or not draw(st.integers(0, 19)):
        return draw(VALUES)
    pairs = []
    for name in names(draw, (*(f.name for f in fields(STAGES[stage])), "colums")):
        if name in NESTED_KEYS and draw(st.booleans()):
            value = draw(blocks(NESTED_KEYS[name], st.one_of(VALUES, blocks(NESTED_KEYS["anchors"], VALUES))))
        elif name in MODEL_MAPPINGS and draw(st.booleans()):
            value = draw(models())
        else:
            value = draw(VALUES)
        pairs.append((name, value))
    return Block(tuple(pairs))


@st.composite
def documents(draw: st.DrawFn) -> tuple[Block, str, str | None]:
    """A params document, the stage whose section is read, and the round (mostly ones the document has)."""
    stages = names(draw, tuple(sorted(STAGES)), 3) or [draw(st.sampled_from(sorted(STAGES)))]
    pairs: list[tuple[str, Any]] = [(stage, draw(sections(stage))) for stage in stages]
    if draw(st.booleans()):
        pairs.append(("base", Block((("seed", draw(st.integers(0, 2**32)) if draw(st.integers(0, 9)) else draw(SCALARS)),))))
    round_name = None
    if draw(st.booleans()):
        round_name, stage = draw(st.sampled_from(ROUNDS)), draw(st.sampled_from(sorted(STAGES)))
        pairs.append(("rounds", Block(((round_name, Block(((stage, draw(sections(stage))),))),))))
    if not draw(st.integers(0, 9)):
        pairs.append(("data" if draw(st.integers(0, 4)) else "similarty", draw(VALUES)))
    read = draw(st.sampled_from([s for s in stages if s in STAGES] or sorted(STAGES)))
    return Block(tuple(draw(st.permutations(pairs)))), read, round_name if draw(st.integers(0, 9)) else "other"


def read_or_refuse(path: Path, stage: str | None = None, round_name: str | None = None) -> Any:
    """What reading the file (and a stage's section) gives, or its one-line refusal, which must name
    the file; any other exception fails the test with the file's contents."""
    try:
        if stage is None:
            return read_params(str(path))
        return load_params(str(path), stage, STAGES[stage], round_name)[0]
    except (ParamError, InputError) as refused:
        message = str(refused)
        assert "\n" not in message and message.startswith(str(path)), message
        return refused
    except Exception as error:
        raise AssertionError(f"{type(error).__name__}: {error} reading {path.read_bytes()[:500]!r}") from error


@pytest.fixture(scope="module")
def params_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("params") / "params.yaml"


@examples(150)
@given(data=st.binary(max_size=300))
def test_any_bytes(params_file: Path, data: bytes) -> None:
    params_file.write_bytes(data)
    read_or_refuse(params_file, "annotate")


@examples(150)
@given(text=st.text(max_size=300))
def test_any_text(params_file: Path, text: str) -> None:
    params_file.write_bytes(text.encode("utf-8", "surrogatepass"))
    read_or_refuse(params_file, "ingest")


TOKENS = (
    *("ingest", "tasks", "rounds", "sits", "reader_options", "gold_per_batch", "positive", "split", "k", "on", "1", "2026-02-30", "0x_"),
    *(":", ": ", " ", "  ", "\n", "\n  ", "\n    ", "- ", "[", "]", "{", "}", ", ", "&a ", "*a", "<<: ", "!!int ", "!!binary "),
    *("'", '"', "#", "\t", "? ", "|", ">", "---", "...", "%YAML 1.1", "\x00", "\udc80", "é", "1e999", "-.inf", ".nan"),
)


@examples(200)
@given(
    tokens=st.lists(st.sampled_from(TOKENS), max_size=40),
    stage=st.sampled_from(sorted(STAGES)),
    round_name=st.sampled_from((None, *ROUNDS)),
)
def test_yaml_token_soup(params_file: Path, tokens: list[str], stage: str, round_name: str | None) -> None:
    params_file.write_bytes("".join(tokens).encode("utf-8", "surrogatepass"))
    read_or_refuse(params_file, stage, round_name)


@examples(250)
@given(drawn=documents())
def test_structured_documents(params_file: Path, drawn: tuple[Block, str, str | None]) -> None:
    document, stage, round_name = drawn
    text = "\n".join(document.lines()) + "\n"
    params_file.write_text(text, encoding="utf-8")
    read = read_or_refuse(params_file)
    if document.repeats_a_key() and not document.has_unsafe_key():
        assert isinstance(read, ParamError) and "written twice (first at line" in str(read), (text, read)
    if document.has_unsafe_key():
        assert isinstance(read, ParamError), (text, read)
    if not isinstance(read, ParamError):  # what the strict reader accepts, it reads as YAML does
        assert json.dumps(read, sort_keys=True, default=repr) == json.dumps(yaml.safe_load(text), sort_keys=True, default=repr)
        read_or_refuse(params_file, stage, round_name)


DEMO = (PROJECT / "params.yaml").read_text(encoding="utf-8").splitlines()
KEY_LINE = re.compile(r"^\s*[A-Za-z_][\w-]*:(\s|$)")


@examples(100)
@given(line=st.sampled_from([i for i, text in enumerate(DEMO) if KEY_LINE.match(text)]))
def test_the_demo_params_with_a_key_line_written_twice(params_file: Path, line: int) -> None:
    params_file.write_text("\n".join([*DEMO[: line + 1], DEMO[line], *DEMO[line + 1 :]]) + "\n", encoding="utf-8")
    refused = read_or_refuse(params_file)
    assert isinstance(refused, ParamError) and str(refused).startswith(f"{params_file}:{line + 2}: ") and "written twice" in str(refused)
