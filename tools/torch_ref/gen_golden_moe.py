"""Generate golden reference data for parallm's C++ mixture-of-experts tests.

Usage::

    /usr/bin/python3 tools/torch_ref/gen_golden_moe.py --out tests/golden [--case NAME] [--noise-floor]

Same file format (``manifest.json`` + ``data.bin`` via
``gen_golden.BlobWriter``), tensor names and training recipe (AdamW via
``configure_optimizers``, lr 3e-3, clip 1.0, 10 steps) as
``gen_golden_llama.py``; the model is ``moe_ref.MoeForCausalLM``.  The loss
that is differentiated and trained is ``LM + sum over MoE layers of
(aux_l + z_l)``.  Tensors beyond the Llama cases' (``x``, ``y``,
``logits``, ``loss``, ``grad/*``, ``train_*``, ``rope_cos``, ``rope_sin``):

* ``loss``                 f32 [1] the LM cross-entropy alone (first forward);
* ``aux_loss``             f32 [1] sum over MoE layers of aux_l + z_l (first forward);
* ``aux_terms/{l}``        f32 [2] (aux_l, z_l) of MoE layer l (first forward);
* ``router_logits/{l}``    f32 [N, E] z of MoE layer l (first forward), N = B*T rows in x's order;
* ``route/{l}``            i32 [N, k] chosen expert ids, in selection order;
* ``route_w/{l}``          f32 [N, k] their weights (after norm_topk and routed_scale);
* ``counts/{l}``           i32 [E] number of tokens routed to each expert;
* ``train_losses``         f32 [S] LM loss of step k (before its update);
* ``train_total_losses``   f32 [S] LM + aux + z of step k (the trained loss);
* ``train_grad_norms``     f32 [S] norm of the total loss's gradient, before clipping.

``param/``, ``grad/`` and ``train_final/`` list every parameter, including
the fixed ``mlp.gate.e_score_correction_bias`` (zero gradient, unchanged by
training: it is not given to the optimizer).

Routing must not sit on a knife's edge: for every case the script asserts
that the smallest gap between the k-th and (k+1)-th largest ``score + b``
over all tokens and MoE layers, at the first forward and at every training
step, exceeds ``MIN_MARGIN`` (1e-5), as do the gaps inside the first
forward's top-k (the stored order), and prints them.  ``--search-seeds N``
writes nothing and lists, per case, the seeds 1..N with the largest
smallest margin (how the cases' seeds were picked).

``--noise-floor`` also redoes every case in float64 from the same fp32
inputs, checks that it routes every token the same way, and prints the fp32
goldens' distance to it; without ``--out`` nothing is written.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import BlobWriter  # noqa: E402
from gen_golden_llama import (BETA1, BETA2, BLOCK, EPS, GRAD_CLIP, LR,  # noqa: E402
                              TRAIN_STEPS, WEIGHT_DECAY, blob_tensor, load)
from gpt_ref import configure_optimizers  # noqa: E402
from llama_ref import LlamaConfig, rope_cos_sin_half  # noqa: E402
from moe_ref import MoeConfig, MoeForCausalLM  # noqa: E402

MIN_MARGIN = 1e-5


def _attn(vocab, C, L, H, KV, D, I, theta, eps, tied, qk_norm):
    return dict(vocab_size=vocab, hidden_size=C, intermediate_size=I, num_hidden_layers=L,
                num_attention_heads=H, num_key_value_heads=KV, head_dim=D, max_position_embeddings=BLOCK,
                rope_theta=theta, rope_scaling=None, rms_norm_eps=eps, attention_bias=False,
                tie_word_embeddings=tied, qk_norm=qk_norm)


# name: (arch, llama config, moe config, batch, seq, seed).  intermediate_size
# is the dense layers' MLP width (unused where every layer is MoE).
CASES = {
    "moe_qwen3_top2_of8": (
        "qwen3", _attn(37, 16, 2, 2, 1, 4, 32, 1e6, 1e-6, tied=False, qk_norm=True),
        MoeConfig(experts=8, top_k=2, intermediate=12, shared=0, score="softmax", norm_topk=True,
                  aux_coef=0.01, z_coef=0.001, first=0, every=1), 2, 12, 116),
    "moe_mixtral_top1_of4": (
        "llama", _attn(41, 16, 2, 4, 2, 4, 32, 1e6, 1e-5, tied=False, qk_norm=False),
        MoeConfig(experts=4, top_k=1, intermediate=8, shared=0, score="softmax", norm_topk=True,
                  aux_coef=0.02, z_coef=0.0, first=0, every=1), 3, 10, 209),
    "moe_top8_of16_shared": (
        "llama", _attn(43, 16, 3, 2, 1, 4, 24, 1e4, 1e-5, tied=False, qk_norm=False),
        MoeConfig(experts=16, top_k=8, intermediate=3, shared=1, score="sigmoid", norm_topk=True,
                  routed_scale=2.5, aux_coef=0.01, z_coef=0.001, first=1, every=1, bias=True), 2, 9, 134),
    "moe_top2_of16_shared2": (
        "llama", _attn(45, 16, 3, 4, 1, 4, 20, 5e5, 1e-5, tied=True, qk_norm=False),
        MoeConfig(experts=16, top_k=2, intermediate=3, shared=2, score="softmax", norm_topk=False,
                  aux_coef=0.01, z_coef=0.0, first=0, every=2), 3, 8, 127),
}


def forward_backward(model: MoeForCausalLM, x: torch.Tensor, y: torch.Tensor):
    logits, lm, aux = model(x, y)
    model.zero_grad(set_to_none=True)
    (lm + aux).backward()
    return logits, lm, aux


def routing(model: MoeForCausalLM) -> dict:
    """{layer: (chosen, weights, score + b)} of the latest forward."""
    return {l: (m.last["chosen"].clone(), m.last["weights"].clone(), m.last["selection"].clone())
            for l, m in model.moe_layers()}


def train(model: MoeForCausalLM, train_x: torch.Tensor, train_y: torch.Tensor):
    """TRAIN_STEPS AdamW steps on LM + aux; returns fp32 (LM losses, total losses,
    grad norms), the smallest routing margin met and every step's routing."""
    opt = configure_optimizers(model, WEIGHT_DECAY, LR, (BETA1, BETA2), EPS)
    params = list(model.parameters())
    losses = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    totals = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    gnorms = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    margin, routes = float("inf"), []
    for k in range(TRAIN_STEPS):
        _, lm, aux = model(train_x[k], train_y[k])
        margin = min(margin, model.min_margin())
        routes.append(routing(model))
        total = lm + aux
        losses[k] = lm.detach()
        totals[k] = total.detach()
        total.backward()
        gnorms[k] = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, totals, gnorms, margin, routes


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (as test_golden.cpp); absolute when want is all zero."""
    want = want.detach().double()
    d = (got.detach().double() - want).abs().max().item()
    m = want.abs().max().item()
    return d / m if m > 0 else d


def report_noise_floor(name, cfg, moe, init_state, x, y, train_x, train_y, logits, loss, aux, blob,
                       model, losses, totals, gnorms, routes32, train_routes32) -> None:
    """Redo the case in float64 from the same fp32 inputs; assert the same routing
    and print how far the fp32 goldens are from it (their rounding-noise floor)."""
    m64 = MoeForCausalLM(cfg, moe).double()  # after every draw of this case
    m64.inv_freq = m64.inv_freq.double()  # the same fp32 frequencies, widened
    state64 = {n: t.double() for n, t in init_state.items()}
    load(m64, state64)
    l64, s64, a64 = forward_backward(m64, x, y)
    r64 = routing(m64)
    for l, (c64, _, _) in r64.items():
        assert torch.equal(c64, routes32[l][0]), f"{name}: fp64 routes layer {l} differently"
    rw = max(rel_err(routes32[l][1], w64) for l, (_, w64, _) in r64.items())
    sel_d = max((routes32[l][2].double() - s64).abs().max().item() for l, (_, _, s64) in r64.items())
    grads = {n: p.grad.clone() for n, p in m64.named_parameters() if p.grad is not None}
    out = [f"logits {rel_err(logits, l64):.1e}", f"loss {abs(loss.item() - s64.item()) / s64.item():.1e}",
           f"aux_loss {abs(aux.item() - a64.item()) / a64.item():.1e}", f"route_w {rw:.1e}"]
    gw = max((rel_err(blob_tensor(blob, 'grad/' + n), grads[n]), n) for n in grads)
    out.append(f"grad {gw[0]:.1e} ({gw[1]})")
    load(m64, state64)
    loss64, tot64, gn64, _, troutes64 = train(m64, train_x, train_y)
    for k, (r32, r64) in enumerate(zip(train_routes32, troutes64)):
        for l in r32:
            assert torch.equal(r32[l][0], r64[l][0]), f"{name}: fp64 routes step {k} layer {l} differently"
            sel_d = max(sel_d, (r32[l][2].double() - r64[l][2]).abs().max().item())
    out.append(f"train_losses {rel_err(losses, loss64):.1e}, train_total_losses {rel_err(totals, tot64):.1e}, "
               f"train_grad_norms {rel_err(gnorms, gn64):.1e}")
    fin = sorted(((rel_err(p32, p64), (p32.detach().double() - p64.detach()).abs().max().item(), n)
                  for (n, p32), (_, p64) in zip(model.named_parameters(), m64.named_parameters())),
                 reverse=True)
    out.append("train_final worst: " + ", ".join(f"{r:.1e} (abs {a:.1e}) {n}" for r, a, n in fin[:3]))
    print(f"{name}: fp64 routes identically (first forward and all {TRAIN_STEPS} steps); "
          f"max |score+b fp32 - fp64| over them {sel_d:.1e}; "
          f"fp32 vs fp64 rel. error: " + "; ".join(out), file=sys.stderr)


def generate_case(name: str, arch: str, mcfg: dict, moe: MoeConfig, batch: int, seq: int, seed: int,
                  out_root: str | None, noise_floor: bool = False, search: bool = False):
    torch.manual_seed(seed)
    cfg = LlamaConfig(**mcfg)
    assert seq < cfg.max_position_embeddings
    assert arch == ("qwen3" if cfg.qk_norm else "llama")
    model = MoeForCausalLM(cfg, moe).float()
    model.train()
    init_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    blob = BlobWriter()
    for pname, p in model.named_parameters():
        blob.add(f"param/{pname}", p)

    V = cfg.vocab_size
    x = torch.randint(0, V, (batch, seq), dtype=torch.long)
    y = torch.randint(0, V, (batch, seq), dtype=torch.long)
    logits, loss, aux = forward_backward(model, x, y)
    margin0 = model.min_margin()
    inner0 = min(m.last["inner_margin"] for _, m in model.moe_layers())
    routes = routing(model)
    blob.add("x", x)
    blob.add("y", y)
    blob.add("logits", logits)
    blob.add("loss", loss.detach().reshape(1))
    blob.add("aux_loss", aux.detach().reshape(1))
    for l, m in model.moe_layers():
        blob.add(f"aux_terms/{l}", torch.stack([m.last["aux"].detach(), m.last["zloss"].detach()]))
        blob.add(f"router_logits/{l}", m.last["logits"])
        blob.add(f"route/{l}", m.last["chosen"])
        blob.add(f"route_w/{l}", m.last["weights"])
        blob.add(f"counts/{l}", m.last["counts"])
    for pname, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, pname
            blob.add(f"grad/{pname}", p.grad)
        else:  # the fixed correction bias
            blob.add(f"grad/{pname}", torch.zeros_like(p))
    counts0 = {l: m.last["counts"].tolist() for l, m in model.moe_layers()}

    train_x = torch.randint(0, V, (TRAIN_STEPS, batch, seq), dtype=torch.long)
    train_y = torch.randint(0, V, (TRAIN_STEPS, batch, seq), dtype=torch.long)
    load(model, init_state)
    losses, totals, gnorms, margin_t, train_routes = train(model, train_x, train_y)
    blob.add("train_x", train_x)
    blob.add("train_y", train_y)
    blob.add("train_losses", losses)
    blob.add("train_total_losses", totals)
    blob.add("train_grad_norms", gnorms)
    for pname, p in model.named_parameters():
        blob.add(f"train_final/{pname}", p)
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            assert torch.equal(p, init_state[pname]), pname
    cos, sin = rope_cos_sin_half(cfg, seq)
    blob.add("rope_cos", cos)
    blob.add("rope_sin", sin)

    margin = min(margin0, margin_t)
    print(f"{name}: seed {seed}: min routing margin (k-th - (k+1)-th of score+b): first forward "
          f"{margin0:.3e}, training {margin_t:.3e}; min gap inside the first forward's top-k "
          f"(their order) {inner0:.3e}", file=sys.stderr)
    if search:
        return min(margin, inner0)
    assert margin > MIN_MARGIN, f"{name}: routing margin {margin:.3e} <= {MIN_MARGIN:g}; pick another seed"
    assert inner0 > MIN_MARGIN, f"{name}: route order gap {inner0:.3e} <= {MIN_MARGIN:g}; pick another seed"

    config = {
        "arch": arch, "n_layer": cfg.num_hidden_layers, "n_head": cfg.num_attention_heads,
        "n_kv_head": cfg.num_key_value_heads, "n_embd": cfg.hidden_size, "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size, "vocab_size": V,
        "block_size": cfg.max_position_embeddings, "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "rms_norm_eps": cfg.rms_norm_eps, "qk_norm": cfg.qk_norm, "attention_bias": cfg.attention_bias,
        "tie_embeddings": cfg.tie_word_embeddings,
        "batch_size": batch, "seq_len": seq,
        "lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP, "train_steps": TRAIN_STEPS,
        "seed": seed,
        "moe": {"experts": moe.experts, "top_k": moe.top_k, "intermediate": moe.intermediate,
                "shared": moe.shared, "score": moe.score, "norm_topk": moe.norm_topk,
                "routed_scale": moe.routed_scale, "aux_coef": moe.aux_coef, "z_coef": moe.z_coef,
                "first": moe.first, "every": moe.every, "bias": moe.bias},
    }
    if out_root is not None:
        blob.write(os.path.join(out_root, name), config)
    if noise_floor:
        report_noise_floor(name, cfg, moe, init_state, x, y, train_x, train_y, logits, loss, aux, blob,
                           model, losses, totals, gnorms, routes, train_routes)
    moe_l = [l for l, _ in model.moe_layers()]
    print(f"{name}: params={model.num_params()}, MoE layers {moe_l}, counts {counts0}, "
          f"loss0={loss.item():.6f} (ln V = {math.log(V):.6f}), aux0={aux.item():.6f}, "
          f"train_losses={[round(v, 4) for v in losses.tolist()]}, "
          f"train_total_losses={[round(v, 4) for v in totals.tolist()]}, data.bin={len(blob.buf)} bytes",
          file=sys.stderr)
    return len(blob.buf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output root, e.g. tests/golden (omit with --noise-floor to write nothing)")
    ap.add_argument("--noise-floor", action="store_true",
                    help="also redo each case in float64 and print the fp32 goldens' rounding-noise floor")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    ap.add_argument("--search-seeds", type=int, metavar="N",
                    help="write nothing; print each case's smallest margin for seeds 1..N (to pick one)")
    args = ap.parse_args()
    if args.out is None and not args.noise_floor and not args.search_seeds:
        ap.error("--out is required (unless --noise-floor or --search-seeds)")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    total = 0
    for name, (arch, mcfg, moe, batch, seq, seed) in CASES.items():
        if args.case and name not in args.case:
            continue
        if args.search_seeds:
            got = sorted(((generate_case(name, arch, mcfg, moe, batch, seq, s, None, search=True), s)
                          for s in range(1, args.search_seeds + 1)), reverse=True)
            print(f"{name}: largest smallest-margins (margin, seed): "
                  + ", ".join(f"({m:.2e}, {s})" for m, s in got[:6]), file=sys.stderr)
            continue
        total += generate_case(name, arch, mcfg, moe, batch, seq, seed, args.out, args.noise_floor)
    print(f"data.bin total {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
