"""Attribution patching is the first-order term of the exact ablation: check it against a finite
difference computed with the exact engine (z_h scaled by 1 - delta)."""

import torch
from helpers import card_for

from circuitloc.engine.attribution import attribute
from circuitloc.engine.layout import out_proj
from circuitloc.engine.scan import Scanner
from circuitloc.models.load import engine_model, load
from circuitloc.prompts import Prompts


def ld(logits, f):
    rows = torch.arange(logits.shape[0])
    return logits[rows, f["a"]] - logits[rows, f["b"]]


def test_attribution_matches_finite_difference(tiny_dirs):
    card = card_for(tiny_dirs["qwen_gqa"])
    bridge, tok = load(card)
    model = engine_model(bridge)
    g = torch.Generator().manual_seed(1)
    n, t = 4, 7
    p = Prompts(torch.randint(4, len(tok), (n, t), generator=g), torch.full((n,), t - 1),
                {"a": torch.randint(4, len(tok), (n,), generator=g), "b": torch.randint(4, len(tok), (n,), generator=g)})
    sc = Scanner(model, card.n_heads, card.d_head)
    att = attribute(sc, p, ld)
    zs = {}
    hs = [out_proj(layer).register_forward_pre_hook(lambda m, a, i=i: zs.__setitem__(i, a[0].detach().clone()))
          for i, layer in enumerate(sc.layers)]
    with torch.no_grad():
        model(p.input_ids)
    for h in hs:
        h.remove()
    delta = 1e-3
    sc.replacement = {i: (1 - delta) * z.view(n, t, card.n_heads, card.d_head) for i, z in zs.items()}
    sets = [{}] + [{layer: [h]} for layer in range(card.n_layers) for h in range(card.n_heads)]
    vals = sc.run(p, sets, {"ld": ld})["ld"].mean(1).double()
    fd = ((vals[1:] - vals[0]) / delta).view(card.n_layers, card.n_heads)
    assert torch.allclose(att.double(), fd, rtol=2e-2, atol=2e-3), (att, fd)
    assert att.abs().max() > 1e-3
