import os

import polars as pl
import pytest

from circuitloc import io


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError):
        with io.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_replaces_whole_and_is_readable_by_others(tmp_path):
    target = tmp_path / "t.parquet"
    io.write_parquet(pl.DataFrame({"a": [1]}), target)
    io.write_parquet(pl.DataFrame({"a": [2]}), target)
    assert pl.read_parquet(target)["a"].to_list() == [2]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_atomic_dir_keeps_old_dir_on_failure(tmp_path):
    d = tmp_path / "w"
    with io.atomic_dir(d) as tmp:
        (tmp / "x").write_text("1")
    with pytest.raises(ValueError):
        with io.atomic_dir(d) as tmp:
            (tmp / "x").write_text("2")
            raise ValueError
    assert (d / "x").read_text() == "1" and [p.name for p in tmp_path.iterdir()] == ["w"]


def test_the_rebuild_hint_names_the_run_directory_where_the_run_used_one(tmp_path, monkeypatch):
    """A job runs in the run's directory: the checkout (its Snakefile there) gives the plain command;
    a run started with `--directory runs/a` needs that flag again for the relative path to mean the
    same file."""
    checkout, run = tmp_path / "checkout", tmp_path / "checkout" / "runs" / "my run"
    run.mkdir(parents=True)
    (checkout / "Snakefile").write_text("")
    monkeypatch.chdir(checkout)
    plain = io.rebuild_hint("results/data/ioi/m.parquet")
    assert plain == ("rebuild it and what depends on it: snakemake --cores all --forcerun "
                     "results/data/ioi/m.parquet (with the run's --configfile)")
    monkeypatch.chdir(run)
    assert io.rebuild_hint("results/data/ioi/m.parquet") == plain.replace(
        "--forcerun", f"--directory '{run}' --forcerun")


@pytest.mark.parametrize("suffix", ["pdf", "png"])
def test_two_saves_of_a_figure_are_byte_identical(tmp_path, suffix):
    """A figure saved twice, a second apart (a PDF's creation date has one-second resolution):
    the same bytes, so two runs' figures are."""
    import time

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from circuitloc.io import save_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [2, 0, 1])
    save_figure(fig, tmp_path / f"a.{suffix}")
    time.sleep(1.1)
    save_figure(fig, tmp_path / f"b.{suffix}")
    plt.close(fig)
    assert (tmp_path / f"a.{suffix}").read_bytes() == (tmp_path / f"b.{suffix}").read_bytes()
