"""``crisscross derive`` end to end on a tiny rated.parquet + captions table, and on CxC files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crisscross.annotate.items import method_task_type
from crisscross.core.errors import ParamError
from crisscross.pipelines import derive

CAPTIONS = {1: (11, 12), 2: (21, 22), 3: (31,), 4: (41, 42, 43)}


def write_build(root: Path) -> tuple[Path, Path]:
    rated, items = root / "rated", root / "items"
    rated.mkdir(parents=True)
    items.mkdir(parents=True)
    rows = [
        ("STS", "coco:cap:11", "coco:cap:21", 4.0),
        ("STS", "coco:cap:11", "coco:cap:12", 4.8),
        ("STS", "coco:cap:31", "coco:cap:41", 2.0),
        ("SIS", "coco:img:1", "coco:img:4", 4.5),
        ("SIS", "coco:img:2", "coco:img:3", 3.3),
        ("SIS", "coco:img:1", "coco:img:5", 3.3),  # unknown image
        ("STS", "coco:cap:21", "coco:cap:42", -1.0),  # score out of range
        ("VERIFY", "coco:img:1", "coco:cap:21", None),
    ]
    table = pa.Table.from_pylist(
        [
            {
                "item_id": f"{t.lower()}:{a}|{b}",
                "task_type": t,
                "id_a": a,
                "id_b": b,
                "sampling_method": "m",
                "agg_score": s,
                "agg_label": None,
                "n": 5,
                "positive": bool(s and s >= 3),
                "simulated": True,
            }
            for t, a, b, s in rows
        ]
    )
    pq.write_table(table, rated / "rated.parquet")
    captions = [
        {"caption_id": f"coco:cap:{c}", "image_id": f"coco:img:{i}", "text": f"caption {c}"} for i, cs in CAPTIONS.items() for c in cs
    ]
    pq.write_table(pa.Table.from_pylist(captions), items / "captions.parquet")
    return rated, items


def run(tmp_path: Path, inputs: str, items: Path, out: str, seed: int = 5) -> dict:
    params = tmp_path / f"params-{seed}.yaml"
    params.write_text(f"base:\n  seed: {seed}\n")
    return derive.main(["--in", inputs, "--items", str(items), "--out", str(tmp_path / out), "--params", str(params)])


def test_derive_stage_writes_candidates_csv_quarantine_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rated, items = write_build(tmp_path / "build")
    report = run(tmp_path, str(rated), items, "derived")
    out = tmp_path / "derived"
    table = pq.read_table(out / "candidates.parquet")
    methods = table.column("method").to_pylist()
    assert report["candidates"] == {"c2i_intrasim": methods.count("c2i_intrasim"), "c2i_original": 8}
    # default quota: 0.22 × 5 usable rated pairs = 1
    assert report["quota"] == 1 and report["candidates"]["c2i_intrasim"] == 1 and report["shortfall"] == 0
    assert {method_task_type(m) for m in methods} == {"SITS"}
    assert all(r["id1"].startswith("coco:cap:") and r["id2"].startswith("coco:img:") for r in table.to_pylist())
    assert (out / "sits_candidates.csv").read_text().splitlines()[0] == "caption,image,sampling_method"
    assert report["rejected"] == {"rated": {"score-out-of-range": 1, "unknown-image": 1}}
    assert report["selection"]["ignored"] == {"VERIFY": 1}
    assert pq.read_table(out / "quarantine.parquet").num_rows == 2
    assert json.loads((out / "report.json").read_text())["quota"] == 1
    printed = capsys.readouterr().out
    assert "derive: done" in printed and "c2i_intrasim: 1 of quota 1" in printed and "ignored: 1 VERIFY rows" in printed


def test_derive_stage_is_byte_deterministic(tmp_path: Path) -> None:
    rated, items = write_build(tmp_path / "build")
    run(tmp_path, str(rated), items, "one")
    run(tmp_path, str(rated), items, "two")
    for name in ("candidates.parquet", "sits_candidates.csv", "quarantine.parquet", "facts.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    one, two = ((tmp_path / d / "report.json").read_text().replace(os.path.relpath(tmp_path / d), "OUT") for d in ("one", "two"))
    assert one == two  # the same but for the output path in the summary lines (relative to the working directory)


def test_derive_stage_replays_cxc_files_and_reports_the_shortfall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, items = write_build(tmp_path / "build")
    cxc = tmp_path / "cxc"
    cxc.mkdir()
    (cxc / "sts_test.csv").write_text(
        "caption1,caption2,agg_score,sampling_method\nCOCO_val2014:sentid:11,COCO_val2014:sentid:21,4.0,c2c_isim\n"
    )
    (cxc / "sis_test.csv").write_text(
        "image1,image2,agg_score,sampling_method\nCOCO_val2014_000000000001.jpg,COCO_val2014_000000000004.jpg,4.5,i2i_csim\n"
    )
    report = run(tmp_path, f"cxc:{cxc}", items, "replayed")
    assert report["quota"] == 0 and report["candidates"]["c2i_intrasim"] == 0  # 0.22 × 2 rounds to 0
    assert report["candidates"]["c2i_original"] == 8


def test_derive_stage_settings_shortfall_and_missing_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rated, items = write_build(tmp_path / "build")
    params = tmp_path / "params.yaml"
    params.write_text("base:\n  seed: 3\nderive:\n  quota: 50\n  ranks: global\n")
    report = derive.main(["--in", str(rated), "--items", str(items), "--out", str(tmp_path / "short"), "--params", str(params)])
    assert report["selection"]["ranks"] == "global"
    assert report["shortfall"] == 50 - report["candidates"]["c2i_intrasim"] > 0
    assert "fewer c2i_intrasim than the quota" in capsys.readouterr().out
    params.write_text("derive:\n  ranks: best-first\n")
    with pytest.raises(ParamError, match="derive.ranks must be one of"):
        derive.main(["--in", str(rated), "--items", str(items), "--out", str(tmp_path / "x"), "--params", str(params)])
    with pytest.raises(FileNotFoundError, match="run the aggregate stage first"):
        derive.main(["--in", str(tmp_path / "nowhere"), "--items", str(items), "--out", str(tmp_path / "x")])
    with pytest.raises(FileNotFoundError, match="CxC release files"):
        derive.main(["--in", f"cxc:{tmp_path / 'nowhere'}", "--items", str(items), "--out", str(tmp_path / "x")])
