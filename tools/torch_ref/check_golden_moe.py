"""Independent check of the MoE goldens against their written semantics.

Usage::

    /usr/bin/python3 tools/torch_ref/check_golden_moe.py [--golden tests/golden] [--case NAME]

Reads only ``tests/golden/moe_*/{manifest.json,data.bin}`` (never
``moe_ref.py``) and recomputes the first forward / backward in float64 with
a deliberately naive, per-token implementation of the rules in
tests/golden/README.md ("MoE cases"): the route order by a sort on
``(-(score + b), expert)``, the per-token expert loop, the aux and z losses
as sums.  Exits 1 unless the routes and counts are equal and the logits,
losses, route weights, aux terms and gradients agree to 1e-5 (relative to
each tensor's largest value).  A second opinion on gen_golden_moe.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

CASES = ["moe_qwen3_top2_of8", "moe_mixtral_top1_of4", "moe_top8_of16_shared", "moe_top2_of16_shared2"]
TOL = 1e-5


def read(d: str):
    with open(os.path.join(d, "manifest.json")) as f:
        man = json.load(f)
    with open(os.path.join(d, "data.bin"), "rb") as f:
        raw = f.read()
    T = {}
    for e in man["tensors"]:
        n = int(np.prod(e["shape"]))
        dt = "<f4" if e["dtype"] == "f32" else "<i4"
        T[e["name"]] = np.frombuffer(raw[e["offset"]:e["offset"] + 4 * n], dtype=dt).reshape(e["shape"])
    return man["config"], T


def rel(a: torch.Tensor, want: np.ndarray) -> float:
    w = torch.from_numpy(want.astype(np.float64))
    m = w.abs().max().item()
    d = (a.detach().double() - w).abs().max().item()
    return d / m if m > 0 else d


def check(d: str) -> list[str]:
    c, T = read(d)
    m = c["moe"]
    P = {k[len("param/"):]: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in T.items() if k.startswith("param/")}
    C, H, KV, D, L, V = c["n_embd"], c["n_head"], c["n_kv_head"], c["head_dim"], c["n_layer"], c["vocab_size"]
    E, k, Fe = m["experts"], m["top_k"], m["intermediate"]
    eps = c["rms_norm_eps"]
    assert c["rope_scaling"] is None and not c["attention_bias"]

    def rms(x, w):
        return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))

    def swiglu(x, g, u, dn):
        return (F.silu(x @ g.T) * (x @ u.T)) @ dn.T

    xi = torch.from_numpy(T["x"].astype(np.int64))
    yi = torch.from_numpy(T["y"].astype(np.int64))
    B, S = xi.shape
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2).float() / D))  # fp32 frequencies
    ang = torch.outer(torch.arange(S).float(), inv).double()
    cos, sin = ang.cos()[None, :, None], ang.sin()[None, :, None]

    def rope(q):  # [B, S, n, D], rotate-half pairs (j, j + D/2)
        a, b = q[..., :D // 2], q[..., D // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    bad: list[str] = []
    h = P["model.embed_tokens.weight"][xi]
    aux_total = 0.0
    for l in range(L):
        p = f"model.layers.{l}."
        a = rms(h, P[p + "input_layernorm.weight"])
        q = (a @ P[p + "self_attn.q_proj.weight"].T).view(B, S, H, D)
        kk = (a @ P[p + "self_attn.k_proj.weight"].T).view(B, S, KV, D)
        v = (a @ P[p + "self_attn.v_proj.weight"].T).view(B, S, KV, D)
        if c["qk_norm"]:
            q, kk = rms(q, P[p + "self_attn.q_norm.weight"]), rms(kk, P[p + "self_attn.k_norm.weight"])
        q, kk = rope(q), rope(kk)
        heads = []
        for hh in range(H):
            g = hh // (H // KV)
            s = q[:, :, hh] @ kk[:, :, g].transpose(1, 2) / math.sqrt(D)
            s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), -math.inf)
            heads.append(torch.softmax(s, -1) @ v[:, :, g])
        h = h + torch.cat(heads, -1) @ P[p + "self_attn.o_proj.weight"].T
        n = rms(h, P[p + "post_attention_layernorm.weight"])
        if not (l >= m["first"] and (l - m["first"]) % m["every"] == 0):
            h = h + swiglu(n, P[p + "mlp.gate_proj.weight"], P[p + "mlp.up_proj.weight"], P[p + "mlp.down_proj.weight"])
            continue
        xs = n.reshape(-1, C)
        N = xs.shape[0]
        Wr = P[p + "mlp.gate.weight"]
        bias = T.get(f"param/{p}mlp.gate.e_score_correction_bias")
        gw, uw, dw = (P[p + f"mlp.experts.{w}.weight"] for w in ("gate_proj", "up_proj", "down_proj"))
        rows, routes, weights, zs, probs = [], [], [], [], []
        count = [0] * E
        for t in range(N):
            z = Wr @ xs[t]
            sc = torch.softmax(z, 0) if m["score"] == "softmax" else torch.sigmoid(z)
            key = [sc[e].item() + (float(bias[e]) if bias is not None else 0.0) for e in range(E)]
            ch = sorted(range(E), key=lambda e: (-key[e], e))[:k]
            w = torch.stack([sc[e] for e in ch])
            if m["norm_topk"]:
                w = w / w.sum()
            w = w * m["routed_scale"]
            o = 0
            for j, e in enumerate(ch):
                count[e] += 1
                o = o + w[j] * swiglu(xs[t], gw[e * Fe:(e + 1) * Fe], uw[e * Fe:(e + 1) * Fe], dw[e * C:(e + 1) * C])
            if m["shared"]:
                o = o + swiglu(xs[t], *(P[p + f"mlp.shared_experts.{w_}.weight"]
                                        for w_ in ("gate_proj", "up_proj", "down_proj")))
            rows.append(o)
            routes.append(ch)
            weights.append(w)
            zs.append(z)
            probs.append(sc if m["score"] == "softmax" else sc / sc.sum())
        if not (np.array(routes) == T[f"route/{l}"]).all():
            bad.append(f"route/{l}")
        if not (np.array(count) == T[f"counts/{l}"]).all():
            bad.append(f"counts/{l}")
        aux = m["aux_coef"] * E / (k * N * N) * sum(count[e] * sum(pt[e] for pt in probs) for e in range(E))
        zl = m["z_coef"] * sum(torch.logsumexp(z, 0) ** 2 for z in zs) / N
        errs = {f"route_w/{l}": rel(torch.stack(weights), T[f"route_w/{l}"]),
                f"router_logits/{l}": rel(torch.stack(zs), T[f"router_logits/{l}"]),
                f"aux_terms/{l}": rel(torch.stack([torch.as_tensor(aux), torch.as_tensor(zl)]), T[f"aux_terms/{l}"])}
        bad += [f"{n_} {e:.1e}" for n_, e in errs.items() if e > TOL]
        aux_total = aux_total + aux + zl
        h = h + torch.stack(rows).view(B, S, C)
    h = rms(h, P["model.norm.weight"])
    logits = h @ P.get("lm_head.weight", P["model.embed_tokens.weight"]).T
    lm = F.cross_entropy(logits.view(-1, V), yi.view(-1))
    (lm + aux_total).backward()
    errs = {"logits": rel(logits, T["logits"]), "loss": rel(lm.reshape(1), T["loss"]),
            "aux_loss": rel(torch.as_tensor(aux_total).reshape(1), T["aux_loss"])}
    for name, t in P.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        errs["grad/" + name] = rel(g, T["grad/" + name])
    worst = max(errs.items(), key=lambda kv: kv[1])
    bad += [f"{n_} {e:.1e}" for n_, e in errs.items() if e > TOL]
    same = not any(b.startswith(("route/", "counts/")) for b in bad)
    print(f"{os.path.basename(d)}: routes and counts {'equal' if same else 'DIFFER'}; "
          f"logits {errs['logits']:.1e}, loss {errs['loss']:.1e}, aux_loss {errs['aux_loss']:.1e}, "
          f"worst {worst[0]} {worst[1]:.1e}" + (f"; FAILED: {bad}" if bad else ""), file=sys.stderr)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                     "tests", "golden"))
    ap.add_argument("--case", action="append", choices=CASES)
    a = ap.parse_args()
    torch.set_num_threads(1)
    bad = [b for name in (a.case or CASES) for b in check(os.path.join(a.golden, name))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
