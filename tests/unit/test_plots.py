"""Figures a reader trusts at a glance: one colour and marker per (family, attention) in every
panel and figure, percentage axes from 0, ticks that do not overprint, MHA and GQA named in the
legend; every figure takes polars frames."""

import ast
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.colors import to_hex

from helpers import model_card

from circuitloc.report.figures import plots
from circuitloc.report.figures import scale as scale_plots
from circuitloc.report.figures import style

TOY_MHA, TOY_GQA, SMOL = 641408, 591872, 134515008


def _table(rows):
    """Table 1 rows as the CSV holds them: heads-to as a count and a bounded flag (h: 'K' or '>K')."""
    return pl.DataFrame([{"model": m, "family": f, "attention": a, "n_params": n, "top_head_pct": p,
                          "top_head_pct_lo": p - 1.0, "top_head_pct_hi": p + 1.0,
                          "heads_to_80": int(str(h).lstrip("> ")), "heads_to_80_bounded": str(h).startswith(">")}
                         for m, f, a, n, p, h in rows])


ALL = _table([("toy_mha", "toy", "mha", TOY_MHA, 22.0, "4"), ("toy_gqa", "toy", "gqa", TOY_GQA, 38.0, "3"),
              ("smollm2_135m", "smollm2", "gqa", SMOL, 68.0, "2")])
# facts_shared of the default run: no SmolLM2, scores 8.00 and 8.08 (the old figure zoomed to that)
PAIR = _table([("toy_mha", "toy", "mha", TOY_MHA, 8.08, "6"), ("toy_gqa", "toy", "gqa", TOY_GQA, 8.00, "5")])


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _colour_at(ax, x, marker):
    """Colour of the data line through x drawn with `marker` (error bar caps are skipped)."""
    found = {to_hex(ln.get_color()) for ln in ax.get_lines()
             if ln.get_marker() == marker and np.any(np.isclose(np.asarray(ln.get_xdata(), float), x))}
    assert len(found) == 1, found
    return found.pop()


def _overlap(labels) -> bool:
    boxes = [t.get_window_extent() for t in labels if t.get_visible() and t.get_text()]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_style_is_fixed_per_family_and_attention():
    a, b = style.style("toy", "gqa"), style.style("toy", "mha")
    assert a == style.style("toy", "GQA") and a["color"] != b["color"] and a["marker"] != b["marker"]
    assert a["label"] == "toy · GQA" and b["label"] == "toy · MHA"
    assert style.style("someone_new", "gqa") == style.style("someone_new", "gqa")  # a stable hash, no cycle


def test_scale_one_colour_per_family_in_every_panel_and_figure():
    # the pair-only panel first and last: the old figure coloured toy GQA by its position in each panel
    fig = scale_plots.scale({"facts_shared": PAIR, "ioi": ALL, "facts": PAIR}, 0.8)
    top = fig.axes[:3]
    gqa = {_colour_at(ax, TOY_GQA, "s") for ax in top}
    mha = {_colour_at(ax, TOY_MHA, "o") for ax in top}
    assert gqa == {style.style("toy", "gqa")["color"].lower()}
    assert mha == {style.style("toy", "mha")["color"].lower()}
    assert _colour_at(top[1], SMOL, "s") == style.style("smollm2", "gqa")["color"].lower()
    assert gqa != mha
    # the same colour in the curves figure
    cards = {"toy_gqa": model_card(family="toy", attention="gqa"), "toy_mha": model_card(family="toy", attention="mha")}
    curve = pl.DataFrame({"method": ["ranked"] * 3, "step": [1, 2, 3], "damage": [0.5, 0.9, 1.0]})
    cfig = plots.curves({"toy_mha": curve, "toy_gqa": curve}, cards, 0.8)
    colours = {ln.get_label(): to_hex(ln.get_color()) for ax in cfig.axes for ln in ax.get_lines()}
    assert colours["toy_gqa (toy · GQA)"] == gqa.pop() and colours["toy_mha (toy · MHA)"] == mha.pop()


def test_scale_axes_from_zero_integer_heads_and_legend_names_attention():
    fig = scale_plots.scale({"ioi": ALL, "facts_shared": PAIR}, 0.8)
    top, bottom = fig.axes[:2], fig.axes[2:4]
    for ax in top:
        lo, hi = ax.get_ylim()
        assert lo == 0 and hi > 68  # a shared percentage axis from 0, never zoomed to 8.00-8.08
    for ax in bottom:
        assert ax.get_ylim()[0] == 0
        assert all(float(t).is_integer() for t in ax.get_yticks())
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any("MHA" in t for t in texts) and any("GQA" in t for t in texts)
    assert "toy · MHA" in texts and "SmolLM2 · GQA" in texts


def test_scale_ticks_do_not_overprint():
    # one panel spans 10% of a decade: the old log axis labelled 5.9e5, 6e5, ... on top of each other
    fig = scale_plots.scale({"facts_shared": PAIR, "facts": PAIR, "ioi": ALL, "induction": ALL}, 0.8)
    fig.canvas.draw()
    for ax in fig.axes:
        assert not _overlap(ax.get_xticklabels(which="both"))
    labels = [t.get_text() for t in fig.axes[-1].get_xticklabels() if t.get_text()]
    assert "1M" in labels and "100M" in labels


def test_scale_marks_a_censored_curve_at_its_bound():
    smol = pl.col("model") == "smollm2_135m"
    t = ALL.with_columns(pl.when(smol).then(16).otherwise(pl.col("heads_to_80")).alias("heads_to_80"),
                         pl.when(smol).then(True).otherwise(pl.col("heads_to_80_bounded")).alias("heads_to_80_bounded"))
    fig = scale_plots.scale({"ioi": t}, 0.8)
    bottom = fig.axes[1]
    assert any(a.get_text() == "> 16" for a in bottom.texts)
    assert bottom.get_ylim()[1] > 16


def test_scale_marks_a_refused_percentage_and_names_the_threshold():
    """A top head score the conditioning rule refused (empty) is an 'n/a' mark, and the axis is not
    stretched to it; a 0.9 threshold reads heads_to_90 and says 90%."""
    t = ALL.with_columns(pl.when(pl.col("model") == "smollm2_135m").then(None).otherwise(pl.col("top_head_pct"))
                         .alias("top_head_pct")).rename({"heads_to_80": "heads_to_90", "heads_to_80_bounded": "heads_to_90_bounded"})
    fig = scale_plots.scale({"facts": t}, threshold=0.9)
    top, bottom = fig.axes[0], fig.axes[1]
    assert any(a.get_text() == "n/a" for a in top.texts)
    assert "90%" in bottom.get_ylabel() and "80%" not in bottom.get_ylabel()
    assert bottom.get_ylim()[1] >= 4


def test_scale_labels_of_two_censored_models_do_not_overlap():
    """The toy pair (0.64M and 0.59M parameters) both '> 8': two labels, neither on top of the other."""
    t = ALL.with_columns(pl.lit(8).alias("heads_to_80"), pl.lit(True).alias("heads_to_80_bounded"))
    fig = scale_plots.scale({"ioi": t}, 0.8)
    fig.canvas.draw()
    bottom = fig.axes[1]
    labels = [a for a in bottom.texts if a.get_text() == "> 8"]
    assert len(labels) == 3
    boxes = [a.get_window_extent() for a in labels]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (labels[i].get_position(), labels[j].get_position())
    plt.close(fig)


def test_curves_accept_polars_and_start_at_zero():
    cards = {"a": model_card(family="toy", attention="mha"), "b": model_card(family="toy", attention="gqa"),
             "c": model_card(family="smollm2", attention="gqa", n_params=SMOL)}
    c = pl.DataFrame({"method": ["ranked"] * 4 + ["random"], "step": [1, 2, 3, 4, 1],
                      "damage": [0.3, 0.7, 0.9, 1.0, 0.1], "damage_lo": [0.2, 0.6, 0.8, 0.9, 0.0],
                      "damage_hi": [0.4, 0.8, 1.0, 1.1, 0.2]})
    fig = plots.curves({"a": c, "b": c, "c": c}, cards, 0.8, title="t")
    assert [ax.get_title() for ax in fig.axes] == ["MHA", "GQA"]  # MHA first
    assert fig.axes[0].get_ylim()[0] == 0
    texts = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert any("MHA" in t for t in texts) and any("GQA" in t for t in texts)


def test_heatmaps_and_stability_read_only_the_columns_they_draw():
    rng = np.random.default_rng(0)
    s = pl.DataFrame({"layer": np.repeat(np.arange(4), 32), "head": np.tile(np.arange(32), 4),
                      "unit": [f"L{i // 32}H{i % 32}" for i in range(128)], "drop": rng.normal(size=128)})
    # a score table carries a column of lists (`heads`) the figure never needs
    sp = s.with_columns(heads=pl.Series([[i % 32] for i in range(128)]))
    fig = plots.heatmaps({"m": s, "p": sp}, cards={"m": model_card(family="toy", attention="gqa")})
    assert "toy · GQA" in fig.axes[0].get_title()
    fig.canvas.draw()
    assert not _overlap(fig.axes[0].get_xticklabels())  # 32 heads on a 3-inch panel
    fig = plots.stability([("m: split", {"a": s, "b": sp})], title="x")
    assert len(fig.axes) == 3  # two maps and one colour bar


def _sweep_frames():
    from circuitloc.report.sweep import summary as sweep

    rows = []
    for kv in (8, 4, 2, 1):
        for seed in range(3):
            cens = kv == 1 and seed == 0
            rows.append({"size": "small", "kv_heads": kv, "seed": seed, "model": f"s_kv{kv}_s{seed}",
                         "accepted": True, "task_behaviour": True, "clean_metric": "ld", "clean": 8.0,
                         "top_head_pct": 30.0 + kv + seed, "top_head_pct_lo": 25.0, "top_head_pct_hi": 45.0,
                         "heads_to_80": np.nan if cens else 3.0 + seed, "heads_to_80_frac": np.nan if cens else 0.2,
                         "heads_to_80_censored": cens, "heads_to_80_bound": 16.0 if cens else np.nan,
                         "heads_to_80_frac_bound": 1.0 if cens else np.nan, "effective_units": 3.0,
                         "top_share": 0.4, "n_units": 16})
    pm = pl.DataFrame(rows).with_columns(used=pl.col("accepted") & pl.col("task_behaviour"))
    return sweep.summarize(pm, 0.95), pm


def test_sweep_accepts_polars_from_zero_and_names_attention():
    summary, pm = _sweep_frames()
    fig = scale_plots.sweep(summary, pm, 0.8, title="t")
    for ax in fig.axes:
        assert ax.get_ylim()[0] == 0
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks[0].endswith("MHA") and ticks[-1].endswith("MQA") and any("GQA" in t for t in ticks)
    assert all(float(t).is_integer() for t in fig.axes[1].get_yticks())
    again = scale_plots.sweep(summary.reverse(), pm.reverse(), 0.8)  # the same colours whatever the row order
    assert [ln.get_color() for ln in again.axes[0].get_lines()] == [ln.get_color() for ln in fig.axes[0].get_lines()]


def test_plots_does_not_import_pandas():
    tree = ast.parse(Path(plots.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not any(n.split(".")[0] == "pandas" for n in names)


def test_sweep_aligns_sizes_by_query_heads_per_kv_head_and_draws_greedy():
    """A size of 4 query heads (KV 4, 2, 1) beside one of 8 (KV 8, 4, 2, 1): each MHA sits at '1 MHA',
    so KV 4 of the 4-head size is drawn as MHA, not as the 8-head size's GQA; a greedy panel joins."""
    from circuitloc.report.sweep import summary as sweep

    rows = []
    for size, kvs in (("a", (8, 4, 2, 1)), ("b", (4, 2, 1))):
        for kv in kvs:
            for seed in range(3):
                rows.append({"size": size, "kv_heads": kv, "seed": seed, "model": f"{size}{kv}{seed}",
                             "accepted": True, "task_behaviour": True, "clean_metric": "ld", "clean": 8.0,
                             "top_head_pct": 30.0 + kv + seed, "top_head_pct_lo": 25.0, "top_head_pct_hi": 45.0,
                             "heads_to_80": 3.0, "heads_to_80_frac": 0.2, "heads_to_80_censored": False,
                             "heads_to_80_bound": np.nan, "heads_to_80_frac_bound": np.nan,
                             "heads_to_80_greedy": 2.0, "heads_to_80_greedy_frac": 0.1,
                             "heads_to_80_greedy_censored": False, "heads_to_80_greedy_bound": np.nan,
                             "heads_to_80_greedy_frac_bound": np.nan,
                             "effective_units": 3.0, "top_share": 0.4, "n_units": 16})
    pm = pl.DataFrame(rows).with_columns(used=pl.col("accepted") & pl.col("task_behaviour"))
    fig = scale_plots.sweep(sweep.summarize(pm, 0.95), pm, 0.8)
    assert len(fig.axes) == 4 and "greedy" in fig.axes[3].get_ylabel()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1\nMHA", "2\nGQA", "4\nGQA", "8\nMQA"]
    lines = {ln.get_label(): ln for ln in fig.axes[1].get_lines() if ln.get_label() in ("a", "b")}
    xb = np.round(np.asarray(lines["b"].get_xdata(), float))
    assert list(xb) == [0, 1, 2]  # KV 4 (MHA of size b), 2, 1 at ratios 1, 2, 4


def test_an_unbounded_interval_draws_to_the_panel_edge():
    """Fieller's interval is the whole line when the span is not clearly above 0 (a sweep toy with
    clean ~ floor): the curve figure and the scale figure draw it past the panel's edge instead of
    failing (matplotlib's transforms overflow on an infinite error bar)."""
    cards = {"a": model_card(family="toy", attention="mha"), "b": model_card(family="toy", attention="gqa")}
    ok = pl.DataFrame({"method": ["ranked"] * 2, "step": [1, 2], "damage": [0.5, 0.9],
                       "damage_lo": [0.4, 0.8], "damage_hi": [0.6, 1.0]})
    wild = pl.DataFrame({"method": ["ranked"] * 2, "step": [1, 2], "damage": [-3.3, -1.2],
                         "damage_lo": [-np.inf, -np.inf], "damage_hi": [np.inf, np.inf]})
    fig = plots.curves({"a": ok, "b": wild}, cards, 0.8)
    fig.canvas.draw()
    lo, hi = fig.axes[1].get_ylim()
    bars = [seg for coll in fig.axes[1].collections for seg in coll.get_segments()]
    assert any(seg[:, 1].min() < lo and seg[:, 1].max() > hi for seg in bars)  # unbounded: beyond both edges
    assert np.isfinite([lo, hi]).all() and hi < 10
    yerr = style.error_bars([0.5, -3.3, np.nan], [0.4, -np.inf, 0.1], [0.6, np.inf, 0.2])
    assert np.allclose(yerr, [[0.1, 1e6, 0.0], [0.1, 1e6, 0.0]])  # a missing value draws no bar
