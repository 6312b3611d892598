"""``crisscross plan`` on a pilot's judgments: the plan, its figure, its report, and bad params."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crisscross.annotate.providers import judgments_table
from crisscross.core import io
from crisscross.pipelines.cli import main as cli
from crisscross.tasktypes.names import SIS, STS


def write_pilot(folder: Path, simulated: bool = False, timed: bool = True) -> Path:
    rng = np.random.default_rng(4)
    rows = []
    for kind, rater_sd in ((STS, 0.9), (SIS, 0.7)):
        for item in range(300):
            true = rng.uniform(0, 5)
            for worker in range(4):
                rows.append(
                    {
                        "item_id": f"{kind.lower()}:{item:04d}",
                        "task_type": kind,
                        "id_a": f"coco:cap:{item}",
                        "id_b": f"coco:cap:{item + 1000}",
                        "worker": f"w{worker}",
                        "score": float(np.clip(true + rater_sd * rng.standard_normal(), 0, 5)),
                        "answer": None,
                        "seconds": 20.0 + worker if timed else None,
                        "time": None,
                        "batch_id": "b1",
                        "source": "simulate" if simulated else "people",
                        "simulated": simulated,
                    }
                )
    folder.mkdir(parents=True)
    io.write_parquet(str(folder / "judgments.parquet"), judgments_table(pd.DataFrame(rows)))
    return folder


def test_the_plan_names_a_design_per_type_and_is_byte_identical_on_rerun(tmp_path: Path, capsys) -> None:
    pilot = write_pilot(tmp_path / "pilot")
    params = tmp_path / "params.yaml"
    params.write_text("plan: {item_half_width: 0.6, budget_judgments: 4000, pay_per_hour: 15}\n")
    argv = ["plan", "--in", str(pilot), "--params", str(params)]
    assert cli([*argv, "--out", str(tmp_path / "a")]) == 0
    assert "total:" in capsys.readouterr().out
    assert cli([*argv, "--out", str(tmp_path / "b")]) == 0
    for name in ("plan.json", "power.png"):  # report.json names its own folder
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    plan = json.loads((tmp_path / "a" / "plan.json").read_text())
    assert set(plan["types"]) == {STS, SIS} and plan["simulated"] is False
    sts, sis = plan["types"][STS], plan["types"][SIS]
    assert sts["pilot"]["rater_sd"] > sis["pilot"]["rater_sd"]  # noisier raters ...
    assert sts["design"]["replicas"] > sis["design"]["replicas"]  # ... need more of them for the same ± on an item
    assert sts["design"]["half_widths"]["item_score"] <= 0.6 and sts["budget"]["items"] == 4000 // sts["design"]["replicas"]
    assert sts["design"]["cost"] == pytest.approx(sts["design"]["rater_hours"] * 15, abs=0.1)
    assert (tmp_path / "a" / "power.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_plan_params_are_one_line(tmp_path: Path, capsys) -> None:
    pilot = write_pilot(tmp_path / "pilot", simulated=True)
    params = tmp_path / "params.yaml"
    for section, message in (
        ("{confidence: 1.5}", "plan.confidence must be > 0.5 and < 1.0, got 1.5"),
        ("{budget: 10}", "unknown plan params ['budget']"),
    ):
        params.write_text(f"plan: {section}\n")
        assert cli(["plan", "--in", str(pilot), "--out", str(tmp_path / "x"), "--params", str(params)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert cli(["plan", "--in", str(tmp_path), "--out", str(tmp_path / "y")]) == 2
    assert "run the annotate stage first" in capsys.readouterr().err


def test_a_pilot_without_times_plans_its_items_and_says_the_time_is_unknown(tmp_path: Path, capsys) -> None:
    """A replayed release has no seconds per judgment: the design stands, its cost is unknown."""
    pilot = write_pilot(tmp_path / "pilot", timed=False)
    assert cli(["plan", "--in", str(pilot), "--out", str(tmp_path / "a")]) == 0
    assert "time unknown (the pilot has no seconds)" in capsys.readouterr().out
    plan = json.loads((tmp_path / "a" / "plan.json").read_text())
    assert plan["total"]["rater_hours"] is None and plan["types"][STS]["design"]["items"] > 0
