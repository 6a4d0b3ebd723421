"""Whether training toys stacked along a leading dimension (one batched computation for several
seeds) is cheaper per toy than training each alone, on the pinned kernel path.

    python bench/toy_stack.py                    # the sweep's small toy shapes, groups of 1, 4 and 8
    python bench/toy_stack.py --kv 8 --rounds 3

A functional two-layer Qwen2 (RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP) whose
body weights are stacked across toys, so every matrix product is one batched product over the
group; each toy keeps its own embedding (toys of different seeds have vocabularies of different
sizes). Synthetic tokens, the sweep recipe's shapes (batch 64 rows of 37 tokens, about a third of the
positions projected on the vocabulary, AdamW). Groups are timed in turn, `--rounds` times, in one
process, without MKL's CPU-dependent vector math (circuitloc.models.toy.exact); every toy's weights
are compared bit for bit with the same toy trained alone, in each group and in one group of the
same toys in reverse order (tests/unit/test_benches.py checks it).
This is the measurement behind the sweep's choice not to stack its toys (docs/sweep.md).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time

from circuitloc import kernels


def _rms(x, w, eps=1e-6):
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w


def _rot(torch, x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def _body(torch, F, P, h, a):
    T, B, L, D = h.shape
    H, KV, dh = a.heads, a.kv, D // a.heads
    for layer in range(2):
        def p(n):
            return P[f"{layer}.{n}"]
        x = _rms(h, p("ln1")[:, None, None]).reshape(T, B * L, D)
        q = torch.baddbmm(p("bq")[:, None], x, p("wq").transpose(1, 2)).view(T, B, L, H, dh).transpose(2, 3)
        k = torch.baddbmm(p("bk")[:, None], x, p("wk").transpose(1, 2)).view(T, B, L, KV, dh).transpose(2, 3)
        v = torch.baddbmm(p("bv")[:, None], x, p("wv").transpose(1, 2)).view(T, B, L, KV, dh).transpose(2, 3)
        q, k = q * a.cos + _rot(torch, q) * a.sin, k * a.cos + _rot(torch, k) * a.sin
        if KV != H:
            k, v = k.repeat_interleave(H // KV, dim=2), v.repeat_interleave(H // KV, dim=2)
        s = (q.reshape(-1, L, dh) @ k.reshape(-1, L, dh).transpose(1, 2)) * (1 / math.sqrt(dh))
        att = (s.view(T, B, H, L, L) + a.mask).softmax(-1).view(-1, L, L) @ v.reshape(-1, L, dh)
        att = att.view(T, B, H, L, dh).transpose(2, 3).reshape(T, B * L, H * dh)
        h = h + torch.bmm(att, p("wo").transpose(1, 2)).view(T, B, L, D)
        x = _rms(h, p("ln2")[:, None, None]).reshape(T, B * L, D)
        mlp = F.silu(torch.bmm(x, p("wg").transpose(1, 2))) * torch.bmm(x, p("wu").transpose(1, 2))
        h = h + torch.bmm(mlp, p("wd").transpose(1, 2)).view(T, B, L, D)
    return _rms(h, P["lnf"][:, None, None])


def _init(torch, seed, a):
    g = torch.Generator().manual_seed(seed)
    D, dh, V = a.d_model, a.d_model // a.heads, a.vocab + seed % 40  # vocabularies differ by seed

    def rnd(*shape):
        return torch.randn(*shape, generator=g) * 0.02
    P = {"emb": rnd(V, D), "lnf": torch.ones(D)}
    for layer in range(2):
        P.update({f"{layer}.ln1": torch.ones(D), f"{layer}.ln2": torch.ones(D), f"{layer}.wq": rnd(a.heads * dh, D),
                  f"{layer}.bq": torch.zeros(a.heads * dh), f"{layer}.wk": rnd(a.kv * dh, D),
                  f"{layer}.bk": torch.zeros(a.kv * dh), f"{layer}.wv": rnd(a.kv * dh, D),
                  f"{layer}.bv": torch.zeros(a.kv * dh), f"{layer}.wo": rnd(D, a.heads * dh),
                  f"{layer}.wg": rnd(a.d_mlp, D), f"{layer}.wu": rnd(a.d_mlp, D), f"{layer}.wd": rnd(D, a.d_mlp)})
    return P


def train(seeds, steps, a):
    """Train the toys `seeds` as one stacked group for `steps` steps: (seconds, digest of each toy)."""
    import torch
    import torch.nn.functional as F

    from circuitloc.models.toy.exact import exact_sqrt

    T, L = len(seeds), a.width
    Ps = [_init(torch, s, a) for s in seeds]
    body = {k: torch.stack([P[k] for P in Ps]).requires_grad_() for k in Ps[0] if k != "emb"}
    embs = [P["emb"].requires_grad_() for P in Ps]
    params = [*body.values(), *embs]
    m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    t0 = time.perf_counter()
    for step in range(steps):
        data = []
        for s, e in zip(seeds, embs):
            g = torch.Generator().manual_seed(s * 100_003 + step)
            data.append(torch.randint(4, e.shape[0], (a.batch, L), generator=g))
        out = _body(torch, F, body, torch.stack([F.embedding(ids, e) for ids, e in zip(data, embs)]), a)
        loss = 0
        for t, (ids, e) in enumerate(zip(data, embs)):  # the vocabulary projection on the last third
            loss = loss + F.cross_entropy(out[t, :, 2 * L // 3:-1].reshape(-1, a.d_model) @ e.T,
                                          ids[:, 2 * L // 3 + 1:].reshape(-1))
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            sq = sum(p.grad.pow(2).reshape(T, -1).sum(1) for p in body.values())
            sq = sq + torch.stack([e.grad.pow(2).sum() for e in embs])
            coef = (1.0 / (exact_sqrt(sq) + 1e-6)).clamp(max=1.0)
            for j, p in enumerate(params):
                c = coef.view(T, *[1] * (p.dim() - 1)) if j < len(body) else coef[j - len(body)]
                grad = p.grad * c
                m[j].mul_(0.9).add_(grad * 0.1)
                v[j].mul_(0.98).add_(grad * grad * 0.02)
                if p.dim() >= 2 or j >= len(body):
                    p.mul_(1 - 5e-3 * 0.01)
                p.sub_(m[j] / (1 - 0.9 ** (step + 1)) / (exact_sqrt(v[j] / (1 - 0.98 ** (step + 1))) + 1e-8) * 5e-3)
    seconds = time.perf_counter() - t0
    digests = []
    for t in range(T):
        h = hashlib.sha256()
        for k in sorted(body):
            h.update(body[k][t].detach().contiguous().numpy().tobytes())
        h.update(embs[t].detach().numpy().tobytes())
        digests.append(h.hexdigest())
    return seconds, digests


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="1,4,8", help="group sizes, timed in turn")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kv", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--d-mlp", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=37)
    ap.add_argument("--vocab", type=int, default=910)
    ap.add_argument("--host", action="store_true", help="the host's kernels instead of the pinned path")
    a = ap.parse_args(argv)
    if not a.host:
        kernels.pin()
    import torch

    from circuitloc.models.toy.exact import rounded_table

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    dh = a.d_model // a.heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, dh, 2).float() / dh))
    f = torch.outer(torch.arange(a.width).float(), inv)
    a.cos, a.sin = rounded_table(torch.cat([f, f], -1), "cos"), rounded_table(torch.cat([f, f], -1), "sin")
    a.mask = torch.full((a.width, a.width), float("-inf")).triu(1)
    sizes = [int(x) for x in a.groups.split(",")]
    per, digests = {n: [] for n in sizes}, {}
    for _ in range(a.rounds):
        for n in sizes:
            seconds, got = train(list(range(n)), a.steps, a)
            per[n].append(1000 * seconds / a.steps / n)
            digests.setdefault(n, got)
    alone = {s: train([s], a.steps, a)[1][0] for s in range(max(sizes))}
    back = train(list(range(max(sizes)))[::-1], a.steps, a)[1][::-1]  # the same toys in reverse order
    best1 = min(per[sizes[0]])
    print(f"{'pinned' if not a.host else 'host'} kernels, one thread, ATen {torch.backends.cpu.get_cpu_capability()}; "
          f"d_model {a.d_model}, {a.heads} heads / {a.kv} KV, batch {a.batch} x {a.width} tokens, {a.steps} steps")
    print(f"  {'toys stacked':>12s} {'ms per toy-step (each round)':>32s} {'best':>8s} {'vs ' + str(sizes[0]):>7s} "
          f"{'toys/min at 900 steps':>22s}  toys' weights vs each trained alone")
    for n in sizes:
        best = min(per[n])
        print(f"  {n:12d} {' '.join(f'{x:7.1f}' for x in per[n]):>32s} {best:8.1f} {best1 / best:6.2f}x "
              f"{60_000 / (best * 900):22.2f}  {_same(digests[n], alone)}")
    print(f"  {'reversed ' + str(max(sizes)):>12s} {'':>32s} {'':>8s} {'':>7s} {'':>22s}  {_same(back, alone)}")


def _same(digests, alone) -> str:
    """'equal (n toys)' when every toy's weights equal those it has when trained alone, bit for bit."""
    bad = [s for s, d in enumerate(digests) if d != alone[s]]
    return f"equal ({len(digests)} toys)" if not bad else f"DIFFERENT: toys {bad}"

if __name__ == "__main__":
    main()
