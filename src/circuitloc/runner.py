"""What every job script does around its library call: logging to the job's log, one torch thread,
and a CircuitlocError turned into one clear line and a failed job. Light on imports (no torch until
a job asks for threads), so a table or figure job's code hash and start-up stay small."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from circuitloc import weightstamps
from circuitloc.errors import CircuitlocError, ConfigError

log = logging.getLogger("circuitloc")


def setup(log_path=None, threads: int | None = None, seed: int = 0) -> None:
    """Logging to the job's log; for a job that computes (`threads` given: its rule's threads, one by
    default, since several jobs beat several threads on a small machine) torch's threads and seed. A
    table or figure job gives no threads and never imports torch."""
    handlers = [logging.StreamHandler()]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", handlers=handlers,
                        force=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no download bars between the job's lines
    if threads is None:
        return
    weightstamps.use()  # a job that loads a model reuses the weights' hash of an earlier job
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # nor weight-loading bars: the job logs its own progress

    torch.set_num_threads(max(1, int(threads)))
    torch.manual_seed(seed)


def check_device(device) -> None:
    """The device the config asks for (`device:`) exists for this job's torch, else a one-line error
    naming the key. Checked when the job starts, not while Snakemake plans: the planning Python is
    not the jobs' with --use-conda, nor a cluster's GPU node, and it imports no torch."""
    if device in (None, "cpu"):
        return
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        why = "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, but no GPU visible"
    elif device == "mps" and not torch.backends.mps.is_available():
        why = "no Apple MPS device"
    else:
        return
    raise ConfigError(f"config: device = {device!r}, but this job's torch {torch.__version__} has no such device "
                      f"({why}): set device: cpu, or run the jobs where one is")


def _device(args, kwargs):
    """The device a job asks for: its `device` argument, or that of a settings record it is given."""
    if "device" in kwargs:
        return kwargs["device"]
    return next((a.device for a in args if isinstance(getattr(a, "device", None), str)), None)


def run(fn, *args, **kwargs):
    """Run a job; a CircuitlocError becomes one clear line and a failed job, not a traceback. A job
    that asks for a device its torch lacks stops first (`check_device`)."""
    try:
        check_device(_device(args, kwargs))
        return fn(*args, **kwargs)
    except CircuitlocError as e:
        log.error("%s", e)
        print(f"circuitloc error: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # an unexpected failure: its traceback goes to the job's log too
        log.exception("%s: %s", type(e).__name__, e)
        sys.exit(1)
