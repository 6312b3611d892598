"""Lanes: batches side by side, results in order, an encoder never shared by two batches at once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from crisscross.embed.encoders import TEXT_ENCODERS, Encoder
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

    one = np.concatenate(list(Lanes([loaded()]).map(encode, batches)))
    two = np.concatenate(list(Lanes([loaded(), loaded()]).map(encode, batches)))
    assert one.shape == (len(texts), 512) and one.tobytes() == two.tobytes()
