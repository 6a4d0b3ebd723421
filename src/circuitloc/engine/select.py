"""Which engine scans a model, and building it: the scan engine (`scan.Scanner`, exact and fast on
the architectures it is proven on, `layout.VERIFIED`) or TransformerLens' bridge
(`bridge.BridgeScanner`). Here, in the engine wing, so the model stage (circuitloc.models) only builds
cards and weights and loads models: no arrow runs from models back up to the engine."""

from __future__ import annotations

from importlib.metadata import version

from circuitloc.engine.bridge import BridgeScanner
from circuitloc.engine.budget import batch_tokens as token_budget
from circuitloc.engine.layout import VERIFIED
from circuitloc.engine.scan import Scanner
from circuitloc.errors import UnsupportedArchitectureError
from circuitloc.modelcard import ModelCard
from circuitloc.models.load import bridge_over

ENGINES = ("auto", "scan", "bridge")


def bridge_architectures() -> tuple[str, ...]:
    """The architectures TransformerLens 4's TransformerBridge has an adapter for."""
    from transformer_lens.factories.architecture_adapter_factory import (
        SUPPORTED_ARCHITECTURES,
    )

    return tuple(sorted(SUPPORTED_ARCHITECTURES))


def unsupported(name: str, architecture: str) -> str:
    """The one-line refusal of an architecture neither engine supports, with what both support."""

    return (f"model {name}: architecture {architecture} is supported neither by the scan engine (exact, fast; "
            f"proven on {', '.join(VERIFIED)}) nor by TransformerLens {_tl_version()}'s bridge (generic, "
            f"slower; supports {', '.join(bridge_architectures())})")


def _tl_version() -> str:

    return version("transformer-lens")


def choose_engine(architecture: str, requested: str = "auto") -> str:
    """'scan' for an architecture the fast engine is proven on (layout.VERIFIED); else 'bridge' where
    TransformerLens supports it (hook_z is its own vocabulary, so no guess about module names);
    else 'scan', trusted only after its self-check. `requested` 'scan' or 'bridge' forces one."""

    if requested == "scan-unverified":  # a card's word for auto's last resort: the same choice again
        requested = "auto"
    if requested not in ENGINES:
        raise ValueError(f"engine {requested!r}: expected one of {', '.join(ENGINES)}")
    if requested != "auto":
        return requested
    if architecture in VERIFIED:
        return "scan"
    return "bridge" if architecture in bridge_architectures() else "scan"


def engine_of(architecture: str) -> str:
    """What a model's card says its jobs scan with: 'scan' (the fast engine, proven on this
    architecture), 'bridge' (TransformerLens' hooks) or 'scan-unverified' (the fast engine on an
    architecture it was not proven on, trusted only where each job's self-check passes)."""
    kind = choose_engine(architecture)
    return "scan-unverified" if kind == "scan" and architecture not in VERIFIED else kind


def scanner_for(card: ModelCard, loaded, batch_tokens: int | str, device: str = "cpu", engine: str = "auto"):
    """The engine a job scans with (`choose_engine`; `engine`: auto, scan or bridge): a
    `scan.Scanner` over `loaded`'s plain model, or a `scan.BridgeScanner` over a TransformerBridge
    on the same weights. An architecture neither supports raises UnsupportedArchitectureError naming
    everything that is supported. `batch_tokens` 'auto': sized to the device (engine.budget)."""

    model, tokenizer = loaded
    batch_tokens = token_budget(batch_tokens, card, device)
    arch = card.architecture or type(model).__name__
    kind = choose_engine(arch, engine)
    if kind == "bridge":
        if arch not in bridge_architectures():
            raise UnsupportedArchitectureError(unsupported(card.name, arch))
        bridge = bridge_over(card, model, tokenizer, device)
        return BridgeScanner(bridge, card.n_heads, card.d_head, batch_tokens, reference=model)
    try:
        scanner = Scanner(model, card.n_heads, card.d_head, batch_tokens)
        # off the CPU, fewer and fuller passes (engine.batching); on it, the default run's exact numbers
        scanner.fill = device != "cpu"
        return scanner
    except UnsupportedArchitectureError as e:
        if engine == "scan":
            raise
        raise UnsupportedArchitectureError(unsupported(card.name, arch)) from e
