"""The weights are hashed once per model: the card's build hashes them and stamps each file
(circuitloc.weightstamps); a job that loads the model then checks size, time and inode against the
stamp and reuses the card's hash. A file changed since is hashed again, and a corrupt one still
refused."""

import importlib
import os
import shutil
import time

import pytest

from circuitloc import weightstamps
from circuitloc.errors import ModelSourceError
from circuitloc.models import card as card_module
from helpers import card_for

load = importlib.import_module("circuitloc.models.load")  # the package exports a function of that name


@pytest.fixture
def hashes(monkeypatch):
    """Every sha256 of a weights file computed (by the build and by the jobs' checks), by file name."""
    seen = []
    real = card_module.sha256_file

    def counted(path):
        seen.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(card_module, "sha256_file", counted)
    monkeypatch.setattr(load, "sha256_file", counted)
    return seen


@pytest.fixture
def stamped(monkeypatch, tmp_path):
    """Stamps on, kept under tmp_path, turned off again after the test."""
    monkeypatch.setattr(weightstamps, "_where", [])
    weightstamps.use(tmp_path / "stamps")


def _model(tiny_dirs, tmp_path, age_s=60):
    """A copy of the tiny Qwen2, its weights last written `age_s` seconds ago, and its card (whose build
    hashes the weights)."""
    d = tmp_path / "model"
    shutil.copytree(tiny_dirs["qwen_mha"], d)
    past = time.time() - age_s
    os.utime(d / "model.safetensors", (past, past))
    card = card_for(d, name="m")
    return d, card.__class__(**{**card.to_dict(), "weights": card_module.weights_record(d)})


def test_the_card_build_hashes_once_and_the_jobs_reuse_it(tiny_dirs, tmp_path, stamped, hashes):
    d, card = _model(tiny_dirs, tmp_path)
    assert hashes == ["model.safetensors"]  # the build's hash
    for _ in range(3):  # three jobs loading the model
        load.check_weights(card)
    assert hashes == ["model.safetensors"]
    # a corrupt file of the same size: written since, so hashed again and refused
    w = d / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(ModelSourceError, match="corrupt"):
        load.check_weights(card)
    assert hashes == ["model.safetensors"] * 2


def test_without_stamps_every_job_hashes(tiny_dirs, tmp_path, hashes, monkeypatch):
    monkeypatch.setattr(weightstamps, "_where", [])
    _, card = _model(tiny_dirs, tmp_path)
    load.check_weights(card)
    load.check_weights(card)
    assert hashes == ["model.safetensors"] * 3


def test_a_stamp_made_just_after_the_file_was_written_is_not_trusted(tiny_dirs, tmp_path, stamped, hashes):
    """A write in the same clock tick as the check would leave the same time: the first job hashes
    again (and its stamp, made well after the write, holds for the next)."""
    _, card = _model(tiny_dirs, tmp_path, age_s=0)
    load.check_weights(card)
    assert hashes == ["model.safetensors"] * 2
    os.utime(card.path + "/model.safetensors", (time.time() - 60, time.time() - 60))  # as if written long ago
    load.check_weights(card)  # a new time: hashed, stamped long after the write
    load.check_weights(card)
    assert hashes == ["model.safetensors"] * 3
