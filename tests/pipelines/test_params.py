"""The params file: read strictly (a key written twice, YAML that only seems right), every nested
option mapping checked when it is read, and whatever goes wrong one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crisscross.aggregate.positives import PositivesSettings
from crisscross.aggregate.round import RoundSettings
from crisscross.annotate.tasks import TaskParams
from crisscross.candidates.machine import FilterSettings
from crisscross.core.errors import ParamError
from crisscross.pipelines.annotate import AnnotateSettings
from crisscross.pipelines.cli import main
from crisscross.pipelines.ingest import IngestSettings
from crisscross.pipelines.similarity import SimilaritySettings
from crisscross.pipelines.stage import load_params, read_params
from crisscross.scoring.protocol import EvaluateSettings

PROJECT = Path(__file__).resolve().parents[2]

DUPLICATES = {
    "section": ("ingest:\n  reader: table\nembed: {}\ningest:\n  strict: true\n", 4, 1, "ingest"),
    "key-in-a-section": ("ingest:\n  reader: table\n  max_text_length: 9\n  reader: coco-captions\n", 4, 2, "reader"),
    "nested-option": ("ingest:\n  reader_options:\n    split: test\n    split: val\n", 4, 3, "split"),
    "round-stage": ("rounds:\n  sits:\n    tasks: {}\n    annotate: {}\n    tasks: {batch_size: 3}\n", 5, 3, "tasks"),
    "round-key": ("rounds:\n  sits:\n    tasks:\n      replicas: 2\n      replicas: 3\n", 5, 4, "replicas"),
    "flow-mapping": ("tasks:\n  gold_per_batch: {positive: 1, negative: 1, positive: 0}\n", 2, 2, "positive"),
    "round-name": ("rounds:\n  sits: {}\n  verify: {}\n  sits: {}\n", 4, 2, "sits"),
}


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_a_key_written_twice_at_any_depth_is_refused_with_both_lines(case: str, tmp_path: Path) -> None:
    text, line, first, key = DUPLICATES[case]
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ParamError) as refused:
        read_params(str(path))
    assert str(refused.value) == f"{path}:{line}: key {key!r} written twice (first at line {first})"


YAML_MISTAKES = {
    "not-utf8": (b"base:\n  seed: 1\ndata:\n  source: caf\xe9.jsonl\n", ":4: not UTF-8 text (byte 0xe9)"),
    "tab-indent": (b"ingest:\n\treader: table\n", ":2: not valid YAML (while scanning for the next token: found character '\\t'"),
    "bad-syntax": (b"similarity:\n  k: [1\n", ":3: not valid YAML"),
    "billion-laughs": (
        b"data:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + b"".join(f"  {n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n".encode() for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
        ":7: holds more than 100,000 values once its aliases are expanded",
    ),
    "alias-loop": (b"data: &x {a: 1, b: *x}\n", ":1: an alias inside the value it names (a loop)"),
    "alias-too-deep": (
        b"a: &a " + b"[" * 40 + b"]" * 40 + b"\nb: " + b"[" * 40 + b"*a" + b"]" * 40 + b"\n",
        ":1: nested more than 64 levels deep once",
    ),
    "bool-key": (b"data:\n  on: data/demo\n", ":2: key 'on' is read as bool True, not a string: quote it"),
    "int-key": (b"rounds:\n  2: {tasks: {}}\n", ":2: key '2' is read as int 2, not a string"),
    "mapping-key": (b"data:\n  ? {a: 1}\n  : x\n", ":2: a mapping cannot be a key: keys are strings"),
    "impossible-date": (b"release:\n  date: 2026-02-30\n", ":2: '2026-02-30' cannot be read as timestamp (day is out of range for month)"),
    "empty-hex": (b"similarity:\n  k: 0x_\n", ":2: '0x_' cannot be read as int"),
    "bad-explicit-float": (b"plan:\n  pay_per_hour: !!float lots\n", ":2: 'lots' cannot be read as float"),
    "nul-byte": (b"base:\n  seed: 1\nx\x00y: 2\n", ":3: not valid YAML (character #x0000 is not allowed)"),
    "control-byte": (b"base:\n  seed: 1\x1b\n", ":2: not valid YAML (character #x001b is not allowed)"),
    "python-tag": (b"data: !!python/object/apply:os.system [ls]\n", ":1: not valid YAML (could not determine a constructor"),
    "too-deep": (b"data:\n  x: " + b"[" * 1000 + b"]" * 1000 + b"\n", ":2: nested more than 64 levels deep"),
    "two-documents": (
        b"base: {}\n---\nbase: {}\n",
        ":2: not valid YAML (expected a single document in the stream: but found another document)",
    ),
}


@pytest.mark.parametrize("case", sorted(YAML_MISTAKES))
def test_yaml_a_params_file_cannot_hold_is_one_line_naming_file_and_line(case: str, tmp_path: Path) -> None:
    data, expected = YAML_MISTAKES[case]
    path = tmp_path / "params.yaml"
    path.write_bytes(data)
    with pytest.raises(ParamError) as refused:
        read_params(str(path))
    message = str(refused.value)
    assert message.startswith(f"{path}{expected}") and "\n" not in message, message


def test_aliases_within_bounds_read_as_yaml_reads_them(tmp_path: Path) -> None:
    shared = {"encoder": "use-m3", "panel_size": 40}
    text = yaml.safe_dump({"annotate": {"simulate": shared}, "rounds": {"r": {"annotate": {"simulate": shared}}}, "data": {"<<": shared}})
    assert "&id001" in text and "*id001" in text  # what yaml.safe_dump writes for a value used twice
    path = tmp_path / "params.yaml"
    path.write_text(text)
    assert read_params(str(path)) == yaml.safe_load(text)
    assert load_params(str(path), "annotate", AnnotateSettings, "r")[0].simulate.panel_size == 40


NESTED = {
    "reader-option": (
        "ingest",
        IngestSettings,
        "ingest:\n  reader: table\n  reader_options: {colums: {text: caption}}\n",
        "ingest.reader_options.colums is not an option of reader 'table'; options: columns, namespace, split",
    ),
    "reader-option-value": (
        "ingest",
        IngestSettings,
        "ingest:\n  reader_options: {text: both}\n",
        "ingest.reader_options.text must be one of ['tok', 'raw', 'tok-then-raw', 'raw-then-tok'], got 'both'",
    ),
    "reader-column": (
        "ingest",
        IngestSettings,
        "ingest:\n  reader: table\n  reader_options: {columns: {caption: text}}\n",
        "ingest.reader_options.columns has key 'caption'; its keys must be among ['image_id', 'caption_id', 'text', 'file_name', 'split']",
    ),
    "backend-option": (
        "similarity",
        SimilaritySettings,
        "similarity:\n  backend: faiss-hnsw\n  backend_options: {block: 64}\n",
        "similarity.backend_options.block is not an option of similarity backend 'faiss-hnsw'; options: ef_construction, ef_search, m",
    ),
    "backend-option-range": (
        "similarity",
        SimilaritySettings,
        "similarity:\n  backend_options: {block: 0}\n",
        "similarity.backend_options.block must be >= 1, got 0",
    ),
    "gold-per-batch": (
        "tasks",
        TaskParams,
        "tasks:\n  gold_per_batch: {positve: 1, negative: 1}\n",
        "tasks.gold_per_batch has key 'positve'; its keys must be among ['positive', 'negative']",
    ),
    "gold-per-batch-in-a-round": (
        "tasks",
        TaskParams,
        "rounds:\n  sits:\n    tasks: {gold_per_batch: {negative: -1}}\n",
        "rounds.sits.tasks.gold_per_batch.negative must be >= 0, got -1",
    ),
    "simulate": (
        "annotate",
        AnnotateSettings,
        "annotate:\n  simulate: {raters: 3}\n",
        "unknown annotate.simulate params ['raters']; known: ['anchors',",
    ),
    "simulate-cross-field": (
        "annotate",
        AnnotateSettings,
        "annotate:\n  simulate: {raters_per_batch: 9, panel_size: 4}\n",
        "annotate.simulate.raters_per_batch must be at most panel_size=4, got 9",
    ),
    "replication": (
        "annotate",
        AnnotateSettings,
        "annotate:\n  replication: {rule: threshold, alpa: 0.1}\n",
        "unknown annotate.replication params ['alpa']; known: ['alpha', 'half_width', 'min_judgments', 'rater_sd', 'rule']",
    ),
    "replication-in-a-round": (
        "annotate",
        AnnotateSettings,
        "rounds:\n  adaptive:\n    annotate: {replication: {rule: sprt}}\n",
        "rounds.adaptive.annotate.replication.rule must be one of ['fixed', 'threshold', 'ci-width'], got 'sprt'",
    ),
    "quality-rules": (
        "aggregate",
        RoundSettings,
        "aggregate:\n  rules: {min_gold: 3}\n",
        "unknown aggregate.rules params ['min_gold']; known: ['max_straightline_share',",
    ),
    "quality-rule-type": (
        "aggregate",
        RoundSettings,
        "aggregate:\n  rules: {min_judgments: 20.5}\n",
        "aggregate.rules.min_judgments must be an integer, got 20.5",
    ),
    "thresholds": (
        "aggregate",
        RoundSettings,
        "aggregate:\n  thresholds: {STS: 3, VERIFY: 2}\n",
        "aggregate.thresholds has key 'VERIFY'; its keys must be among",
    ),
    "evaluate-model": (
        "evaluate",
        EvaluateSettings,
        "evaluate:\n  models:\n    clip: {source: score-matrix, paht: clip.npz}\n",
        "evaluate.models.clip.paht is not an option of model source 'score-matrix'; options: gallery, path, source",
    ),
    "evaluate-model-required": (
        "evaluate",
        EvaluateSettings,
        "evaluate:\n  models:\n    clip: {source: score-matrix}\n",
        "evaluate.models.clip.path is required by model source 'score-matrix'",
    ),
    "evaluate-model-gallery": (
        "evaluate",
        EvaluateSettings,
        "evaluate:\n  models:\n    clip: {text: c, image: c, gallery: some}\n",
        "evaluate.models.clip.gallery must be one of ['auto', 'full', 'covered'], got 'some'",
    ),
    "evaluate-model-empty": (
        "evaluate",
        EvaluateSettings,
        "evaluate:\n  models:\n    clip: {}\n",
        "evaluate.models.clip: a model of the embeddings names a text or an image encoder, or both",
    ),
    "filter-annotator": (
        "filter",
        FilterSettings,
        "filter:\n  annotators:\n    clip: {txt: c, image: c}\n",
        "filter.annotators.clip.txt is not an option of model source 'embeddings'; options: gallery, image, source, text",
    ),
    "audit-model": (
        "positives",
        PositivesSettings,
        "positives:\n  audit_models:\n    clip: {source: clip}\n",
        "positives.audit_models.clip.source must be one of ['embeddings', 'score-matrix'], got 'clip'",
    ),
    "section-not-a-mapping": ("ingest", IngestSettings, "ingest: false\n", "ingest must be a mapping of keys to values, got bool"),
}


@pytest.mark.parametrize("case", sorted(NESTED))
def test_every_nested_option_mapping_is_checked_when_the_params_are_read(case: str, tmp_path: Path) -> None:
    stage, settings, text, expected = NESTED[case]
    path = tmp_path / "params.yaml"
    path.write_text(text)
    round_name = next((name for name in ("sits", "adaptive") if f"  {name}:" in text), None)
    with pytest.raises(ParamError) as refused:
        load_params(str(path), stage, settings, round_name)
    assert str(refused.value).startswith(f"{path}: ") and expected in str(refused.value), str(refused.value)


@pytest.mark.parametrize(
    ("argv", "text", "expected"),
    [
        (
            ["ingest"],
            "ingest:\n  reader: coco-karpathy-jsonl\n  reader_options:\n    split: test\n  reader_options:\n    text: raw\n",
            ":5: key 'reader_options' written twice",
        ),
        (
            ["ingest"],
            "ingest:\n  reader: table\n  reader_options: {colums: {text: caption}}\n",
            "ingest.reader_options.colums is not an option of reader 'table'",
        ),
        (
            ["similarity"],
            "similarity:\n  backend_options: {blok: 64}\n",
            "similarity.backend_options.blok is not an option of similarity backend 'exact'",
        ),
        (
            ["tasks", "--items", "i", "--embeddings", "e"],
            "tasks:\n  gold_per_batch: {positve: 1}\n",
            "tasks.gold_per_batch has key 'positve'",
        ),
        (["annotate"], b"annotate:\n  format: csv\xff\n", ":2: not UTF-8 text (byte 0xff)"),
    ],
    ids=["duplicate", "reader-option", "backend-option", "gold-per-batch", "not-utf8"],
)
def test_the_command_says_one_line_and_exits_2_before_any_work(
    argv: list[str], text: str | bytes, expected: str, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "params.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "out"
    assert main([argv[0], "--in", str(tmp_path / "missing"), "--out", str(out), "--params", str(path), *argv[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and expected in err[0], err
    assert not out.exists()
