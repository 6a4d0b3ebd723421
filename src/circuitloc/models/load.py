"""One way to open every model: a TransformerBridge on raw weights (no folding) and its tokenizer."""

from __future__ import annotations

import copy
import itertools
import json
import logging
from pathlib import Path
from time import perf_counter

import torch

from circuitloc import weightstamps
from circuitloc.errors import ConfigError, ModelSourceError
from circuitloc.modelcard import ModelCard
from circuitloc.models.card import sha256_file
from circuitloc.plan.hooks.command import command_with, rerun
from circuitloc.plan.config.hub import hf_source
from circuitloc.plan.jobs.resources import DEFAULT_DTYPE
from circuitloc.plan.paths import CARD

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_hf(name: str, repo: str, revision: str | None = None) -> str:
    """`hf:` as `from_pretrained` reads it (circuitloc.plan.config.hub.hf_source): an existing local directory as
    is; else a hub id (`gpt2`, `EleutherAI/pythia-160m`) at `revision` (branch, tag or commit;
    default main) through the local cache (never a silent download offline). The returned snapshot
    directory is named by its commit (circuitloc.plan.config.hub.snapshot_commit)."""

    try:
        kind, repo = hf_source(name, repo, revision)
    except ConfigError as e:
        raise ModelSourceError(f"model {name!r}: {e}") from None
    if kind == "dir":
        if not (Path(repo) / "config.json").exists():
            raise ModelSourceError(f"model {name!r}: {repo} has no config.json (not a Hugging Face model directory)")
        return repo
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE, HF_HUB_OFFLINE

    try:
        return snapshot_download(repo, revision=revision, local_files_only=HF_HUB_OFFLINE,
                                 allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "tokenizer*"])
    except Exception as e:  # noqa: BLE001 - any failure here means the same thing to the user
        where = f"the Hugging Face cache {HF_HUB_CACHE}"
        rev = f" --revision {revision}" if revision else ""
        hint = ("pre-download it on a machine with internet: `hf download "
                f"{repo}{rev}` with the same HF_HOME" if HF_HUB_OFFLINE else "check the id, the revision and your network")
        at = f" at revision {revision}" if revision else ""
        raise ModelSourceError(f"model {name!r}: {repo}{at} not found in {where} "
                               f"(HF_HUB_OFFLINE={int(HF_HUB_OFFLINE)}); {hint}. ({type(e).__name__}: {e})") from e


def load_tokenizer(path: str):
    """The tokenizer exactly as saved. transformers 5's AutoTokenizer picks a class from the
    model type (Qwen2 -> a byte-level BPE) even for a word-level tokenizer.json saved beside a
    Qwen2 config, which silently re-tokenizes everything; a plain tokenizer.json is loaded as is."""

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_path = Path(path) / "tokenizer_config.json"
    cls = json.loads(cfg_path.read_text()).get("tokenizer_class") if cfg_path.exists() else None
    if cls in ("TokenizersBackend", "PreTrainedTokenizerFast") and (Path(path) / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def check_weights(card: ModelCard) -> None:
    """The weights a job is about to load are the ones its card was built from: each file's size
    (free: catches a truncated file at once), then its sha256, streamed, unless a stamp says the
    file hashed to it before and is unchanged since (circuitloc.weightstamps: once per model). A corrupt file is a
    one-line error naming it and saying how to get it back, not a model that computes garbage.
    A card without a weights record (one a test builds in memory) is not checked."""


    files = (card.weights or {}).get("files") or {}
    t0 = perf_counter()
    for name, want in files.items():
        f = Path(card.path) / name
        if not f.is_file():
            raise ModelSourceError(f"model {card.name!r}: weights file {f} is missing; {_restore_hint(card, True)}")
        if f.stat().st_size != want["bytes"]:
            raise ModelSourceError(f"model {card.name!r}: weights file {f} has {f.stat().st_size} bytes, its card "
                                   f"says {want['bytes']} (truncated or replaced); {_restore_hint(card, True)}")
    hashed = 0
    for name, want in files.items():
        f = Path(card.path) / name
        if weightstamps.known(f, want["sha256"]):  # hashed before, unchanged since: the card's hash holds
            continue
        got, hashed = sha256_file(f), hashed + 1
        if got != want["sha256"]:
            raise ModelSourceError(f"model {card.name!r}: weights file {f} is corrupt (sha256 {got}, its card "
                                   f"says {want['sha256']}); {_restore_hint(card)}")
        weightstamps.remember(f, got)
    if files:
        logging.getLogger("circuitloc").info("model %s: weights match the card (%d files, %d hashed, the rest as "
                                             "hashed before and unchanged since; %.1f s)", card.name, len(files),
                                             hashed, perf_counter() - t0)


def _restore_hint(card: ModelCard, seen_by_plan: bool = False) -> str:
    """How to get a model's weights back: its own (toy, gguf) are rebuilt with the card. A missing
    file or one of another size (`seen_by_plan`) the plan sees and rebuilds on a plain rerun of the
    user's command (plan.jobs.weights); a corrupt file of the right size only the sha256 check here sees,
    so Snakemake must be told (a forcerun of the card). An hf model's are the hub cache's or the
    user's directory."""
    card_path = CARD.format(model=card.name)
    if card.source != "hf" and seen_by_plan:
        cmd = command_with() or "your snakemake command"
        return f"rerun your command, which rebuilds the model: {cmd}"
    if card.source != "hf":
        return _rebuild_card(card_path)
    if card.revision:
        return (f"fetch it again with the same HF_HOME: hf download {card.hf} --revision {card.revision} "
                "--force-download")
    return f"the directory changed since the card was built: restore it, or {_rebuild_card(card_path)}"


def _rebuild_card(card_path: str) -> str:
    """The command that rebuilds a model's card and weights alone, as the user typed theirs
    (circuitloc.plan.hooks.command): a rebuilt card is byte-identical, so what was made from it stands;
    the same command as before then remakes any file a failed job removed."""
    cmd = rerun(card_path) or f"snakemake {card_path} --cores all --forcerun {card_path} (with the run's --configfile)"
    return f"rebuild the model alone: {cmd}; then rerun your command"


def load_hf(path: str, dtype: str = DEFAULT_DTYPE, device: str = "cpu", *, attn: str = "eager",
            device_map: str | None = None, max_memory: dict | None = None):
    """(model, tokenizer), the weights read straight onto `device` in `dtype` (transformers 5 reads
    safetensors lazily, so host memory stays near one copy in that dtype: no float32 copy on the
    host, no second copy for a `.to(device)`). `device_map` 'auto': spread over the node's GPUs by
    accelerate, within `max_memory` ({GPU index or 'cpu': '40GiB'}); `attn`: the attention kernel
    (`attention_for`)."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(path)
    where = {"device_map": device}
    if device_map == "auto":
        where = {"device_map": "auto", "max_memory": memory_map(max_memory)}
    try:
        # a tensor of another shape than config.json's (an MLP width that differs) is reported in the
        # loading info, which `_check_loading_info` refuses in one line, not raised from the middle
        # of transformers' loading report
        model, info = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], attn_implementation=attn,
                                                           output_loading_info=True, ignore_mismatched_sizes=True,
                                                           **where)
    except Exception as e:
        bad = _unreadable_weights(path)
        if bad is None:
            raise
        raise ModelSourceError(bad) from e
    _check_loading_info(path, info)
    return model.eval(), tokenizer


def memory_map(max_memory: dict | None) -> dict | None:
    """A `max_memory:` block as accelerate reads it: GPU indices as ints (a card's JSON keeps them as
    strings), 'cpu' and 'disk' as they are."""
    if not max_memory:
        return None
    return {int(k) if str(k).isdigit() else k: v for k, v in max_memory.items()}


def attention_for(card: ModelCard, device: str) -> str:
    """'sdpa' (PyTorch's fused attention) for the fast engine on a GPU, on the architectures it is
    proven on (the card's engine 'scan') whose transformers class has an sdpa path: the engine
    hooks only the output projection's input, which sdpa computes as eager does (within the
    self-check's tolerance, tests/models/test_sdpa.py). 'eager' elsewhere: on a CPU, so that the
    default run's float32 numbers stay bit for bit what they were (sdpa's CPU kernel sums in another
    order); for the bridge engine, whose TransformerLens hooks reimplement attention from eager's
    pieces; for an unverified architecture; and for one without sdpa (Gemma 2: its attention
    logits' soft-cap exists in eager only)."""
    if device == "cpu" or card.engine != "scan":
        return "eager"
    import transformers

    return "sdpa" if getattr(getattr(transformers, card.architecture, None), "_supports_sdpa", False) else "eager"


def _check_loading_info(path: str, info: dict) -> None:
    """Weights that do not fit config.json are refused, not run: transformers fills a tensor the
    weights lack with random values (a 3-layer config on 2-layer weights scores a random layer)
    and skips one the config lacks (its third layer ignored), and says so on the console only.
    One line naming the directory and the first mismatched tensor."""
    for key, what in (("missing_keys", "the weights lack"), ("unexpected_keys", "config.json has no place for"),
                      ("mismatched_keys", "the weights have another shape for")):
        keys = sorted(info.get(key) or ())
        if keys:
            first = keys[0][0] if isinstance(keys[0], tuple) else keys[0]
            if isinstance(keys[0], tuple) and len(keys[0]) == 3:  # (name, the weights' shape, config.json's)
                first += f" (the weights {list(keys[0][1])}, config.json {list(keys[0][2])})"
            raise ModelSourceError(f"{path}: weights do not match its config.json: {what} {len(keys)} tensor(s), "
                                   f"the first {first}; restore the directory's weights or config.json")


def _unreadable_weights(path: str) -> str | None:
    """One line naming the first safetensors file of `path` that does not open (truncated or
    corrupt), or None when they all do (the load failed for another reason)."""
    from safetensors import safe_open

    for f in sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else ():
        try:
            with safe_open(str(f), "pt") as handle:
                handle.keys()
        except Exception as e:  # safetensors raises its own SafetensorError, not an OSError
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return (f"{f}: truncated or corrupt safetensors file ({first}); restore the model directory, or "
                    "rebuild it with snakemake --cores all --forcerun <its card.json>")
    return None


def _twin(model):
    """A second module tree over the very same weight tensors (no copy): the bridge wraps one
    tree in place with its hook points, the scan engine runs the other without that overhead."""

    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo=shared).eval()


def load_engine(card: ModelCard, device: str = "cpu"):
    """(plain Hugging Face model, tokenizer) for a card: all the scan engine needs, without
    importing TransformerLens or building its bridge (seconds per job)."""
    check_weights(card)
    return load_hf(card.path, card.dtype, device, attn=attention_for(card, device), device_map=card.device_map,
                   max_memory=card.max_memory)


def bridge_over(card: ModelCard, model, tokenizer, device: str = "cpu"):
    """TransformerLens' TransformerBridge over the very weights of `model` (raw, unfolded)."""
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(card.path, hf_model=_twin(model), tokenizer=tokenizer,
                                                 dtype=DTYPES[card.dtype], device=device)
    bridge.eval()
    object.__setattr__(bridge, "_plain_model", model)  # not a submodule: no double registration
    return bridge


def load(card: ModelCard, device: str = "cpu"):
    """(bridge, tokenizer) for a card: TransformerLens' TransformerBridge on raw weights.
    `engine_model(bridge)` is the same weights as a plain Hugging Face model."""
    model, tokenizer = load_engine(card, device)
    return bridge_over(card, model, tokenizer, device), tokenizer


def engine_model(bridge):
    return getattr(bridge, "_plain_model", None) or bridge.original_model
