"""Aggregate-stage figures: valid, byte-reproducible PNGs that say what they show."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from crisscross.aggregate.plots import (
    SIMULATED_NOTE,
    item_std_figure,
    item_std_png,
    png_bytes,
    score_distribution_figure,
    score_distribution_png,
)
from crisscross.annotate.providers import load_cxc_release

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def rated() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    groups = [
        ("SITS", "c2i_original", 30),
        ("STS", "c2c_isim", 40),
        ("STS", "c2c_cocaption", 25),
        ("SIS", "i2i_csim", 20),
    ]
    frames = [pd.DataFrame({"task_type": t, "sampling_method": m, "agg_score": rng.uniform(0, 5, n).round(2)}) for t, m, n in groups]
    scores = pd.concat(frames, ignore_index=True)
    return scores.assign(std=rng.uniform(0, 1.5, len(scores)))


def legend_texts(figure: Figure) -> dict[str, list[str]]:
    return {ax.get_title().split("\n")[0]: [t.get_text() for t in ax.get_legend().get_texts()] for ax in figure.axes}


def test_score_distribution_png_is_valid_and_byte_identical(rated: pd.DataFrame) -> None:
    png = score_distribution_png(rated)
    assert png.startswith(PNG_SIGNATURE) and len(png) > 5_000
    assert png == score_distribution_png(rated)
    assert png == score_distribution_png(rated.sample(frac=1.0, random_state=3))  # row order does not matter
    assert b"Software" not in png and b"matplotlib" not in png


def test_score_distribution_panels_series_and_counts(rated: pd.DataFrame) -> None:
    figure = score_distribution_figure(rated)
    assert [ax.get_title() for ax in figure.axes] == ["STS", "SIS", "SITS"]  # task types in canonical order
    assert legend_texts(figure) == {
        "STS": ["all (n=65)", "c2c_cocaption (n=25)", "c2c_isim (n=40)"],
        "SIS": ["i2i_csim (n=20)"],
        "SITS": ["c2i_original (n=30)"],
    }
    assert figure.get_suptitle() == "Aggregated scores"


def test_simulated_data_says_so(rated: pd.DataFrame) -> None:
    figure = score_distribution_figure(rated, simulated=True)
    assert SIMULATED_NOTE in figure.get_suptitle()
    assert SIMULATED_NOTE in item_std_figure(rated, simulated=True).get_suptitle()
    assert score_distribution_png(rated, simulated=True) != score_distribution_png(rated)


def test_item_std_png_and_items_without_std(rated: pd.DataFrame) -> None:
    png = item_std_png(rated)
    assert png.startswith(PNG_SIGNATURE) and png == item_std_png(rated)
    single = rated.assign(std=np.where(rated["task_type"] == "SIS", np.nan, rated["std"]))
    figure = item_std_figure(single.drop(columns="sampling_method"))
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["STS", "SIS\n20 items without std not shown", "SITS"]
    assert legend_texts(figure)["STS"] == ["all (n=65)"]
    wide = item_std_figure(rated.assign(std=3.2))
    assert wide.axes[0].get_xlim() == (0.0, 3.5)  # the axis grows past 2.5 when the data does


def test_empty_input_gives_a_no_data_figure(rated: pd.DataFrame) -> None:
    for figure in (
        score_distribution_figure(rated.iloc[:0]),
        item_std_figure(rated.iloc[:0], simulated=True),
    ):
        assert [t.get_text() for t in figure.axes[0].texts] == ["no data"]
        assert png_bytes(figure).startswith(PNG_SIGNATURE)


def test_bad_input_is_an_error(rated: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="rated lacks columns \\['sampling_method'\\]"):
        score_distribution_png(rated.drop(columns="sampling_method"))
    with pytest.raises(ValueError, match="2 agg_score values that are null, non-numeric or outside"):
        score_distribution_png(rated.assign(agg_score=[np.nan, 7.0, *rated["agg_score"][2:]]))
    with pytest.raises(ValueError, match="stats lacks columns \\['std'\\]"):
        item_std_png(rated.drop(columns="std"))
    with pytest.raises(ValueError, match="1 negative std values"):
        item_std_png(rated.assign(std=[-0.1, *rated["std"][1:]]))


def test_real_cxc_val_distribution_counts(shared_data: Path) -> None:
    """The CxC validation release drawn like its Figure 3: items per task type and method."""
    items, judgments, _ = load_cxc_release(shared_data / "cxc", "val")
    means = judgments.to_pandas().groupby("item_id")["score"].agg(["mean", "std"])
    rated = items.to_pandas().join(means, on="item_id").rename(columns={"mean": "agg_score"})
    assert legend_texts(score_distribution_figure(rated)) == {
        "STS": ["all (n=44,009)", "c2c_cocaption (n=25,000)", "c2c_isim (n=19,009)"],
        "SIS": ["i2i_csim (n=40,514)"],
        "SITS": ["all (n=44,722)", "c2i_intrasim (n=19,722)", "c2i_original (n=25,000)"],
    }
    # Only SIS pairs published in both orders have two rows, hence a std.
    assert item_std_figure(rated).axes[1].get_title() == "SIS\n38,261 items without std not shown"
