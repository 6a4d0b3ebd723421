"""What every figure shares: one colour, marker and line style per (model family, attention type),
fixed in advance, never drawn from matplotlib's cycle, so a model keeps its colour whichever other
models share its panel; axes from zero; parameter-count ticks; frames converted on entry."""

from __future__ import annotations

import zlib

import matplotlib

matplotlib.use("Agg")
import numpy as np
import polars as pl


# -- frames ----------------------------------------------------------------------------------
def frame(df, columns: list[str] | None = None) -> pl.DataFrame:
    """A polars DataFrame of df (polars, or anything pl.DataFrame takes), keeping only `columns`
    when given (those present)."""
    out = df if isinstance(df, pl.DataFrame) else pl.DataFrame(df)
    return out.select([c for c in columns if c in out.columns]) if columns is not None else out


def as_array(df: pl.DataFrame, col: str) -> np.ndarray:
    """A column as float numpy (null -> NaN; a non-numeric string such as '> 8' -> NaN)."""
    s = df[col]
    if s.dtype == pl.String:
        s = s.str.strip_chars().cast(pl.Float64, strict=False)
    return s.cast(pl.Float64, strict=False).fill_null(float("nan")).to_numpy()


# -- one style per (family, attention) ---------------------------------------------------------
ATTENTION = {  # marker, line style, name in legends
    "mha": ("o", "-", "MHA"),
    "gqa": ("s", "--", "GQA"),
    "mqa": ("^", ":", "MQA"),
}
# The families this project runs, fixed (colour-blind-safe Okabe-Ito and tab10 colours); any other
# (family, attention) gets one of EXTRA by a stable hash of its name.
COLOURS = {
    ("toy", "mha"): "#0072B2",  # blue
    ("toy", "gqa"): "#E69F00",  # orange
    ("smollm2", "gqa"): "#009E73",  # green
    ("smollm2", "mha"): "#56B4E9",  # sky blue
    ("pythia", "mha"): "#CC79A7",  # pink
    ("pythia", "gqa"): "#D55E00",  # vermillion
    ("qwen2.5", "gqa"): "#6A3D9A",  # purple
    ("qwen2.5", "mha"): "#8C564B",  # brown
}
EXTRA = ["#17BECF", "#BCBD22", "#7F7F7F", "#000000", "#F0E442", "#1F3A93", "#A0522D", "#2E8B57"]
FAMILY_NAMES = {"toy": "toy", "smollm2": "SmolLM2", "pythia": "Pythia", "qwen2.5": "Qwen2.5", "gpt2": "GPT-2",
                "llama": "Llama"}


def style(family: str, attention: str) -> dict:
    """color, marker, linestyle and label ('toy · MHA') of a model family and attention type: the
    same in every figure and panel, whatever else is drawn."""
    family, attention = str(family), str(attention).lower()
    key = (family.lower(), attention)
    colour = COLOURS.get(key) or EXTRA[zlib.crc32(f"{key[0]}|{key[1]}".encode()) % len(EXTRA)]
    marker, ls, name = ATTENTION.get(attention, ("D", "-.", attention.upper()))
    return {"color": colour, "marker": marker, "linestyle": ls,
            "label": f"{FAMILY_NAMES.get(family.lower(), family)} · {name}"}


def attention_order(kind: str) -> tuple:
    return (list(ATTENTION).index(kind) if kind in ATTENTION else len(ATTENTION), kind)


def family_order(family: str, attention: str) -> tuple:
    """Legend order: the toy pair first, then families by name; MHA before GQA within one."""
    return (family.lower() != "toy", family.lower(), attention_order(attention))


# -- axes helpers ------------------------------------------------------------------------------
def from_zero(ax, values, top: float | None = None, pad: float = 0.08):
    """y from 0 (or below, only when a value is negative) to a little above the largest value."""
    v = np.asarray([x for x in np.ravel(values) if np.isfinite(x)], float)
    lo = min(0.0, float(v.min())) if len(v) else 0.0
    hi = max(float(v.max()) if len(v) else 0.0, top or 0.0)
    span = (hi - lo) or 1.0
    ax.set_ylim(lo - (pad * span if lo < 0 else 0.0), hi + pad * span)


def error_bars(y, lo, hi, far: float = 1e6) -> np.ndarray:
    """`yerr` for errorbar: [y - lo, hi - y], clipped at 0, a missing bound drawing no bar. An
    unbounded end (Fieller's ratio interval is the whole line when the span is not clearly above 0)
    runs `far` past the value, beyond any panel's edge: matplotlib's transforms overflow on inf."""
    y, lo, hi = (np.asarray(a, float) for a in (y, lo, hi))
    lo, hi = np.where(np.isneginf(lo), y - far, lo), np.where(np.isposinf(hi), y + far, hi)
    return np.nan_to_num(np.clip([y - lo, hi - y], 0, None))


def params_label(x, _pos=None) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= div:
            v = x / div
            return f"{v:.0f}{unit}" if v >= 1 and abs(v - round(v)) < 1e-9 else f"{v:g}{unit}"
    return f"{x:g}"
