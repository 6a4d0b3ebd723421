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


@pytest.fixture
def no_command(monkeypatch):
    """No command recorded, and none left behind: plan.hooks.command.record sets the process's environment,
    which the later tests of this worker (and the Snakemake runs they start) would inherit."""
    from circuitloc import usercommand

    for key in (usercommand.ENV, usercommand.CWD):
        monkeypatch.setenv(key, "")  # remembered as it was: the teardown restores (or removes) it
        monkeypatch.delenv(key)


def test_the_recovery_hints_print_the_users_own_command(no_command, tmp_path, monkeypatch):
    """`.venv/bin/snakemake` as the README shows it, its --configfile and --directory: the hints print
    that command back with the forcerun added, not a bare `snakemake` (command not found there)."""
    from helpers import model_card

    from circuitloc.models.load import _restore_hint
    from circuitloc.plan.hooks import command

    monkeypatch.chdir(tmp_path)
    argv = [".venv/bin/snakemake", "--cores", "4", "--configfile", "my config.yaml", "--directory", "runs/a"]
    command.record(argv, [], str(tmp_path))
    card = "results/models/m/card.json"
    assert command.rerun(card) == (f".venv/bin/snakemake {card} --cores 4 --configfile 'my config.yaml' "
                                   f"--directory runs/a --forcerun {card}")
    assert io.rebuild_hint("results/data/ioi/m.parquet") == (
        "rebuild it and what depends on it: .venv/bin/snakemake --cores 4 --configfile 'my config.yaml' "
        "--directory runs/a --forcerun results/data/ioi/m.parquet")
    lost = model_card(name="m", source="toy")
    # a missing or cut weights file: the plan rebuilds it, so the user's own command as it was
    assert _restore_hint(lost, True) == ("rerun your command, which rebuilds the model: .venv/bin/snakemake "
                                              "--cores 4 --configfile 'my config.yaml' --directory runs/a")
    assert command.rerun(card) in _restore_hint(lost)  # a corrupt one: the card forced
    monkeypatch.chdir(tmp_path / "..")  # a job in the run directory (--directory): cd to where it was typed
    assert command.rerun(card).startswith(f"cd {tmp_path} && .venv/bin/snakemake {card} ")


@pytest.mark.parametrize("how", ["path", "absolute", "module"])
def test_the_program_is_recorded_as_typed(no_command, tmp_path, monkeypatch, how):
    """`snakemake` where the PATH finds that very program; a path typed as such, relative or absolute
    (not on the PATH); `python -m snakemake` with this interpreter."""
    import sys

    from circuitloc.plan.hooks import command

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "snakemake"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) if how == "path" else str(tmp_path / "nowhere"))
    argv0 = {"path": str(exe), "absolute": str(exe), "module": "/x/site-packages/snakemake/__main__.py"}[how]
    want = {"path": ["snakemake"], "absolute": [str(exe)], "module": [sys.executable, "-m", "snakemake"]}[how]
    assert command.program(argv0) == want
    command.record([argv0, "-n", "target.txt"], ["target.txt"], os.getcwd())
    assert command.rerun("t") == " ".join([*want, "t", "-n", "--forcerun", "t"])
