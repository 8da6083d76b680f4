#!/usr/bin/env python3
"""Hugging Face Qwen3-MoE / Mixtral model directories <-> the PyTorch MoE reference.

The MoE counterpart of ``llama_hf_dir.py`` (same file layout, safetensors
writer / reader and token list).  Write mode makes a directory laid out as
``save_pretrained`` would (without the transformers or safetensors
packages) from ``moe_ref.MoeForCausalLM`` initialised with a fixed seed,
plus the reference's logits of a fixed token sequence::

    moe_hf_dir.py --preset hf_qwen3_moe_tiny --out DIR [--dtype fp32|bf16] [--tokens 3,1,4] [--shards 2]
    moe_hf_dir.py --goldens tests/golden      # every preset, into tests/golden/<preset>/

Files: ``config.json``, ``generation_config.json``,
``model-0000k-of-0000N.safetensors`` + ``model.safetensors.index.json``
(tensors in parameter order, N contiguous runs), ``tokens.json`` and
``logits.bin`` (float32 [T, V], computed in fp32 from the weights as
stored, i.e. bf16-rounded for bf16).  The script asserts that the routing
of those tokens has no near-tie (k-th minus (k+1)-th expert score > 1e-5 in
every MoE layer) and prints the smallest margin.

Read mode loads such a directory (``model_type`` qwen3_moe or mixtral;
``model.safetensors`` or sharded; F32 / BF16 / F16) into the reference and
prints its logits::

    moe_hf_dir.py --read DIR [--tokens 3,1,4] [--out logits.bin] [--compare parallm.bin] [--tol 1e-5]

Tensor names.  parallm / moe_ref stack the experts (``mlp.experts.gate_proj.weight``
[E*Fe, C], ``up_proj`` [E*Fe, C], ``down_proj`` [E*C, Fe]); the HF
checkpoints hold one tensor per expert, rows ``e*Fe ..`` (``e*C ..`` for
down) of the stacked ones:

* ``Qwen3MoeForCausalLM`` (model_type ``qwen3_moe``): router
  ``model.layers.{l}.mlp.gate.weight`` [E, C]; experts
  ``model.layers.{l}.mlp.experts.{e}.gate_proj.weight`` [Fe, C],
  ``.up_proj.weight`` [Fe, C], ``.down_proj.weight`` [C, Fe]; dense layers
  ``model.layers.{l}.mlp.gate_proj / up_proj / down_proj.weight`` (width
  ``intermediate_size``); attention as Qwen3 (q_norm / k_norm).
* ``MixtralForCausalLM`` (model_type ``mixtral``): router
  ``model.layers.{l}.block_sparse_moe.gate.weight`` [E, C]; experts
  ``model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight`` (gate) [Fe, C],
  ``.w3.weight`` (up) [Fe, C], ``.w2.weight`` (down) [C, Fe]; every layer
  MoE; attention as Llama / Mistral.

config.json fields written (checked against transformers' ``Qwen3MoeConfig``
and ``MixtralConfig`` as I know them; HF default in brackets where a reader
may meet the field absent):

* both: ``architectures``, ``model_type``, ``vocab_size``, ``hidden_size``,
  ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``num_key_value_heads``, ``head_dim``, ``hidden_act`` ("silu"),
  ``max_position_embeddings``, ``initializer_range``, ``rms_norm_eps``,
  ``use_cache``, ``tie_word_embeddings`` [false], ``rope_theta``,
  ``attention_dropout``, ``num_experts_per_tok``, ``output_router_logits``,
  ``router_aux_loss_coef`` [0.001], ``torch_dtype``, ``bos_token_id``,
  ``eos_token_id``.
* qwen3_moe: ``num_experts``, ``moe_intermediate_size`` (expert width;
  ``intermediate_size`` is the dense layers' width), ``norm_topk_prob``
  [false], ``decoder_sparse_step`` [1], ``mlp_only_layers`` [[]],
  ``rope_scaling``, ``attention_bias``, ``use_sliding_window``,
  ``sliding_window``, ``max_window_layers``.  HF's rule: layer l is sparse
  iff ``l not in mlp_only_layers and num_experts > 0 and (l + 1) %
  decoder_sparse_step == 0``.
* mixtral: ``num_local_experts``, ``intermediate_size`` is the expert width
  (there are no dense layers), ``sliding_window`` (null),
  ``router_jitter_noise`` (0; training-only noise).  Mixtral always
  renormalises the top-k weights (no flag).

Routing, both: ``softmax`` over the E router logits (fp32), top-k,
renormalised to sum 1 for Mixtral and for Qwen3-MoE iff norm_topk_prob;
no shared experts, no selection bias, no routed scaling.  The aux-loss
coefficient plays no part in the logits.
Torch is needed to run this script, never to build or test parallm.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_hf_dir import (BOS, DEFAULT_TOKENS, EOS, ST_DTYPES, parse_tokens,  # noqa: E402
                          read_safetensors, write_safetensors)
from llama_ref import LlamaConfig  # noqa: E402
from moe_ref import MoeConfig, MoeForCausalLM  # noqa: E402

MIN_MARGIN = 1e-5
ARCHS = {"qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM"}

PRESETS = {
    # Layer 1 dense (mlp_only_layers), layers 0 and 2 MoE; bf16 weights as
    # Qwen3 releases ship.
    "hf_qwen3_moe_tiny": dict(
        arch="qwen3_moe", dtype="bf16", seed=5, router_aux_loss_coef=0.001,
        config=dict(vocab_size=61, hidden_size=16, intermediate_size=40, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                    rope_theta=1000000.0, rope_scaling=None, rms_norm_eps=1e-6, attention_bias=False,
                    tie_word_embeddings=False, qk_norm=True),
        moe=dict(experts=8, top_k=2, intermediate=12, score="softmax", norm_topk=True, layers=(0, 2))),
    # head_dim = hidden_size / heads (older MixtralConfig has no head_dim).
    "hf_mixtral_tiny": dict(
        arch="mixtral", dtype="fp32", seed=3, router_aux_loss_coef=0.02,
        config=dict(vocab_size=61, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                    rope_theta=1000000.0, rope_scaling=None, rms_norm_eps=1e-5, attention_bias=False,
                    tie_word_embeddings=False, qk_norm=False),
        moe=dict(experts=4, top_k=2, intermediate=24, score="softmax", norm_topk=True)),
}


# ----------------------------------------------------------------------------- names

_STACKED = re.compile(r"^(model\.layers\.\d+\.)mlp\.experts\.(gate_proj|up_proj|down_proj)\.weight$")
_ROUTER = re.compile(r"^(model\.layers\.\d+\.)mlp\.gate\.weight$")
MIXTRAL_PROJ = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}


def expert_name(arch: str, prefix: str, e: int, proj: str) -> str:
    if arch == "mixtral":
        return f"{prefix}block_sparse_moe.experts.{e}.{MIXTRAL_PROJ[proj]}.weight"
    return f"{prefix}mlp.experts.{e}.{proj}.weight"


def router_name(arch: str, prefix: str) -> str:
    return f"{prefix}block_sparse_moe.gate.weight" if arch == "mixtral" else f"{prefix}mlp.gate.weight"


def to_hf(arch: str, model: MoeForCausalLM) -> list[tuple[str, torch.Tensor]]:
    """The model's parameters under HF names, experts split, in parameter order
    (an MoE layer's experts listed e = 0..E-1, each gate, up, down)."""
    moe = model.moe
    E = moe.experts
    params = dict(model.named_parameters())
    out = []
    for name, p in params.items():
        m = _STACKED.match(name)
        if m:
            if m.group(2) != "gate_proj":
                continue  # emitted with gate_proj
            pre = m.group(1)
            stacks = {proj: params[f"{pre}mlp.experts.{proj}.weight"] for proj in MIXTRAL_PROJ}
            for e in range(E):
                for proj, t in stacks.items():
                    rows = t.shape[0] // E
                    out.append((expert_name(arch, pre, e, proj), t[e * rows:(e + 1) * rows]))
            continue
        m = _ROUTER.match(name)
        if m:
            out.append((router_name(arch, m.group(1)), p))
            continue
        assert "e_score_correction_bias" not in name and "shared_experts" not in name, name
        out.append((name, p))
    return out


def from_hf(arch: str, model: MoeForCausalLM, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map HF tensors onto the model's parameter names (stacking the experts);
    raises SystemExit on a missing or unexpected tensor."""
    E = model.moe.experts
    used, state = set(), {}

    def take(n: str) -> torch.Tensor:
        if n not in tensors:
            raise SystemExit(f"missing tensor {n}")
        used.add(n)
        return tensors[n]

    for name, _ in model.named_parameters():
        m = _STACKED.match(name)
        if m:
            state[name] = torch.cat([take(expert_name(arch, m.group(1), e, m.group(2))) for e in range(E)], 0)
            continue
        m = _ROUTER.match(name)
        state[name] = take(router_name(arch, m.group(1)) if m else name)
    extra = sorted(k for k in set(tensors) - used if not k.endswith("rotary_emb.inv_freq"))
    if extra:
        raise SystemExit(f"unexpected tensors {extra}")
    return state


# ----------------------------------------------------------------------------- config.json


def hf_config_json(arch: str, cfg: LlamaConfig, moe: MoeConfig, aux_coef: float, torch_dtype: str) -> dict:
    L = cfg.num_hidden_layers
    d = {
        "architectures": [ARCHS[arch]],
        "model_type": arch,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size if arch == "qwen3_moe" else moe.intermediate,
        "num_hidden_layers": L,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": cfg.rms_norm_eps,
        "use_cache": True,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "rope_theta": cfg.rope_theta,
        "attention_dropout": 0.0,
        "num_experts_per_tok": moe.top_k,
        "output_router_logits": False,
        "router_aux_loss_coef": aux_coef,
        "torch_dtype": torch_dtype,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
    }
    if arch == "qwen3_moe":
        d.update(num_experts=moe.experts, moe_intermediate_size=moe.intermediate, norm_topk_prob=moe.norm_topk,
                 decoder_sparse_step=1, mlp_only_layers=[l for l in range(L) if not moe.is_moe(l)],
                 rope_scaling=cfg.rope_scaling, attention_bias=cfg.attention_bias,
                 use_sliding_window=False, sliding_window=None, max_window_layers=L)
    else:
        assert all(moe.is_moe(l) for l in range(L)) and moe.norm_topk, "Mixtral: every layer MoE, normalised"
        assert not cfg.qk_norm and cfg.rope_scaling is None and not cfg.attention_bias
        d.update(num_local_experts=moe.experts, sliding_window=None, router_jitter_noise=0.0)
    assert moe.score == "softmax" and moe.shared == 0 and not moe.bias and moe.routed_scale == 1.0
    return d


def config_from_json(c: dict) -> tuple[str, LlamaConfig, MoeConfig]:
    mt = c.get("model_type")
    if mt not in ARCHS:
        raise SystemExit(f"model_type {mt!r} is not supported ({', '.join(ARCHS)})")
    if c.get("hidden_act", "silu") != "silu":
        raise SystemExit(f"hidden_act {c['hidden_act']!r} is not supported")
    if c.get("use_sliding_window", False) or (mt == "mixtral" and c.get("sliding_window") is not None):
        raise SystemExit("sliding-window attention is not supported")
    H, C, L = c["num_attention_heads"], c["hidden_size"], c["num_hidden_layers"]
    if mt == "qwen3_moe":
        step = c.get("decoder_sparse_step", 1)
        only = set(c.get("mlp_only_layers") or [])
        E = c.get("num_experts", 0)
        layers = tuple(l for l in range(L) if l not in only and E > 0 and (l + 1) % step == 0)
        moe = MoeConfig(experts=max(E, 1), top_k=c["num_experts_per_tok"], intermediate=c["moe_intermediate_size"],
                        norm_topk=bool(c.get("norm_topk_prob", False)), layers=layers,
                        aux_coef=float(c.get("router_aux_loss_coef", 0.001)))
        dense_width = c["intermediate_size"]
    else:
        moe = MoeConfig(experts=c["num_local_experts"], top_k=c["num_experts_per_tok"],
                        intermediate=c["intermediate_size"], norm_topk=True, layers=tuple(range(L)),
                        aux_coef=float(c.get("router_aux_loss_coef", 0.001)))
        dense_width = c["intermediate_size"]  # unused: no dense layers
    cfg = LlamaConfig(
        vocab_size=c["vocab_size"], hidden_size=C, intermediate_size=dense_width, num_hidden_layers=L,
        num_attention_heads=H, num_key_value_heads=c.get("num_key_value_heads") or H,
        head_dim=c.get("head_dim") or C // H, max_position_embeddings=c.get("max_position_embeddings", 2048),
        rope_theta=float(c.get("rope_theta", 1000000.0 if mt == "mixtral" else 10000.0)),
        rope_scaling=c.get("rope_scaling") if mt == "qwen3_moe" else None,
        rms_norm_eps=float(c.get("rms_norm_eps", 1e-5 if mt == "mixtral" else 1e-6)),
        attention_bias=bool(c.get("attention_bias", False)) if mt == "qwen3_moe" else False,
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        qk_norm=(mt == "qwen3_moe"))
    return mt, cfg, moe


# ----------------------------------------------------------------------------- write / read


def reference_logits(model: MoeForCausalLM, tokens: list[int]) -> tuple[np.ndarray, float]:
    """Logits [T, V] (fp32) and the smallest routing margin of that forward."""
    with torch.no_grad():
        logits, _, _ = model(torch.tensor([tokens], dtype=torch.long))
    return logits[0].float().numpy().astype("<f4"), model.min_margin()


def split_runs(named: list, shards: int) -> list[list]:
    """Contiguous runs of about equal element count, each non-empty."""
    sizes = [t.numel() for _, t in named]
    total, groups, acc, start = sum(sizes), [], 0, 0
    for i, s in enumerate(sizes):
        acc += s
        left_tensors, left_groups = len(named) - i - 1, shards - len(groups) - 1
        if left_groups > 0 and (acc >= total * (len(groups) + 1) / shards or left_tensors == left_groups):
            groups.append(named[start:i + 1])
            start = i + 1
    groups.append(named[start:])
    assert len(groups) == shards and all(groups)
    return groups


def write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def write_dir(out: str, name: str, dtype: str | None, tokens: list[int], shards: int) -> None:
    pr = PRESETS[name]
    arch, dtype = pr["arch"], dtype or pr["dtype"]
    cfg, moe = LlamaConfig(**pr["config"]), MoeConfig(**pr["moe"])
    if max(tokens) >= cfg.vocab_size:
        raise SystemExit(f"token id {max(tokens)} >= vocab_size {cfg.vocab_size}")
    torch.manual_seed(pr["seed"])
    model = MoeForCausalLM(cfg, moe).float().eval()
    st_dtype, tdt = ST_DTYPES[dtype]
    with torch.no_grad():  # the stored weights are what the logits come from
        for p in model.parameters():
            p.copy_(p.to(tdt).float())
    named = to_hf(arch, model)
    assert 2 <= shards <= len(named)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):  # stale shards of an earlier run
        if f.endswith(".safetensors") or f == "model.safetensors.index.json":
            os.remove(os.path.join(out, f))
    weight_map, total_bytes = {}, 0
    for k, g in enumerate(split_runs(named, shards)):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total_bytes += write_safetensors(os.path.join(out, fname), g, st_dtype)
        for n, _ in g:
            weight_map[n] = fname
    write_json(os.path.join(out, "model.safetensors.index.json"),
               {"metadata": {"total_size": total_bytes}, "weight_map": weight_map})
    write_json(os.path.join(out, "config.json"),
               hf_config_json(arch, cfg, moe, pr["router_aux_loss_coef"], "float32" if dtype == "fp32" else "bfloat16"))
    write_json(os.path.join(out, "generation_config.json"), {"bos_token_id": BOS, "eos_token_id": EOS})
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump(tokens, f)
        f.write("\n")
    ref, margin = reference_logits(model, tokens)
    if margin <= MIN_MARGIN:
        raise SystemExit(f"{name}: routing margin {margin:.3e} <= {MIN_MARGIN:g} for these tokens; "
                         "pick another seed")
    ref.tofile(os.path.join(out, "logits.bin"))
    # Round trip: the directory, read back, gives the same logits.
    back, _ = reference_logits(load_dir(out), tokens)
    assert np.array_equal(back, ref), f"{out}: read-back logits differ"
    routes = {l: m.last["chosen"].tolist() for l, m in model.moe_layers()}
    print(f"{out}: {arch} {dtype}, {len(named)} tensors in {shards} shards, {total_bytes} bytes of weights, "
          f"logits {ref.shape[0]}x{ref.shape[1]}, max |logit| {np.abs(ref).max():.6f}, "
          f"min routing margin {margin:.3e}, routes {routes}", file=sys.stderr)


def load_dir(d: str) -> MoeForCausalLM:
    with open(os.path.join(d, "config.json")) as f:
        arch, cfg, moe = config_from_json(json.load(f))
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors: dict[str, torch.Tensor] = {}
    for fn in files:
        for k, v in read_safetensors(os.path.join(d, fn)).items():
            if k in tensors:
                raise SystemExit(f"{k} appears in more than one file")
            tensors[k] = v
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:
        print("note: tied model stores lm_head.weight; ignored (embed_tokens is used)", file=sys.stderr)
        del tensors["lm_head.weight"]
    model = MoeForCausalLM(cfg, moe).float()
    state = from_hf(arch, model, tensors)
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = state[name]
            if tuple(t.shape) != tuple(p.shape):
                raise SystemExit(f"{name}: shape {list(t.shape)}, expected {list(p.shape)}")
            p.copy_(t)
    return model.eval()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--read", metavar="DIR", help="load DIR into the reference and print its logits")
    mode.add_argument("--preset", choices=sorted(PRESETS), help="write this preset's directory to --out")
    mode.add_argument("--goldens", metavar="ROOT", help="write every preset to ROOT/<preset>/")
    ap.add_argument("--out", help="--preset: output directory; --read: write logits (float32 [T, V]) here")
    ap.add_argument("--dtype", choices=sorted(ST_DTYPES), help="override the preset's weight dtype")
    ap.add_argument("--shards", type=int, default=2, help="number of safetensors files (>= 2)")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--compare", help="--read: float32 [T, V] logits file to compare with")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    tokens = parse_tokens(a.tokens)

    if a.read:
        model = load_dir(a.read)
        if tokens is None:
            tj = os.path.join(a.read, "tokens.json")
            tokens = json.load(open(tj)) if os.path.exists(tj) else DEFAULT_TOKENS
        ref, margin = reference_logits(model, tokens)
        np.set_printoptions(precision=6, suppress=True, linewidth=160)
        print(f"tokens {tokens}")
        print(f"reference logits: {ref.shape[0]} positions x {ref.shape[1]} tokens, "
              f"max |logit| {np.abs(ref).max():.6f}, argmax {ref.argmax(-1).tolist()}, "
              f"min routing margin {margin:.3e}" + (" (near-tie: a port may route differently)"
                                                     if margin <= MIN_MARGIN else ""))
        for l, m in model.moe_layers():
            print(f"layer {l} routes: {m.last['chosen'].tolist()}")
        print(ref)
        if a.out:
            ref.tofile(a.out)
        if a.compare:
            got = np.fromfile(a.compare, dtype="<f4").reshape(ref.shape)
            rel = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
            same = bool((got.argmax(-1) == ref.argmax(-1)).all())
            print(f"{a.compare} vs reference: max relative difference {rel:.3g} (tolerance {a.tol:g}), "
                  f"same argmax at every position: {same}")
            return 0 if rel <= a.tol else 1
        return 0

    if a.preset and not a.out:
        ap.error("--preset needs --out")
    jobs = {a.preset: a.out} if a.preset else {p: os.path.join(a.goldens, p) for p in PRESETS}
    for name, out in jobs.items():
        write_dir(out, name, a.dtype, tokens if tokens is not None else DEFAULT_TOKENS, a.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
