#!/usr/bin/env python3
"""Hugging Face Llama / Qwen3 model directories <-> the PyTorch reference.

Write mode makes a directory laid out as ``save_pretrained`` would (without
the transformers or safetensors packages) from ``llama_ref.LlamaForCausalLM``
initialised with a fixed seed, plus the reference's logits of a fixed token
sequence::

    llama_hf_dir.py --preset hf_llama_tiny --out DIR [--dtype fp32|bf16] [--tokens 3,1,4] [--shards 2]
    llama_hf_dir.py --goldens tests/golden        # both presets, into tests/golden/<preset>/

Files written:

* ``config.json``: architectures, model_type (``llama`` / ``qwen3``), the
  shape fields, rope_theta, rope_scaling, rms_norm_eps, attention_bias,
  tie_word_embeddings, torch_dtype, hidden_act ``silu``, bos/eos ids;
* ``generation_config.json`` (bos/eos ids);
* ``model-0000k-of-0000N.safetensors`` (N >= 2) and
  ``model.safetensors.index.json`` = ``{"metadata": {"total_size": bytes of
  tensor data}, "weight_map": {name: file}}``.  Tensors in registration
  order, split into N contiguous runs of about equal size; dtype F32 or
  BF16 (round-to-nearest-even of the fp32 init).  Tied models have no
  ``lm_head.weight``.
* ``tokens.json`` (list of ids) and ``logits.bin``: float32 [T, V], the
  reference's logits for those tokens, computed in fp32 from the weights
  *as stored* (bf16-rounded for ``--dtype bf16``).

safetensors layout: 8-byte little-endian header length n, n bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{"format": "pt"}}`` padded with spaces to a multiple of 8, then the raw
little-endian data, offsets relative to the end of the header.

Read mode loads any such directory (config.json + ``model.safetensors`` or a
sharded index; F32 / BF16 / F16 tensors; model_type llama, qwen3 or qwen2)
into the reference model and prints its logits::

    llama_hf_dir.py --read DIR [--tokens 3,1,4] [--out logits.bin] [--compare parallm.bin] [--tol 1e-5]

Without ``--tokens`` the directory's ``tokens.json`` is used.  ``--compare``
reads float32 [T, V] logits and exits 1 if max|a-b| / max|ref| > tol.
Torch is needed to run this script, never to build or test parallm.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import LlamaConfig, LlamaForCausalLM  # noqa: E402

DEFAULT_TOKENS = [3, 14, 15, 9, 26, 53, 58, 9, 7, 9, 31]

PRESETS = {
    "hf_llama_tiny": dict(
        arch="llama", dtype="fp32", seed=7,
        config=dict(vocab_size=61, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                    rope_theta=10000.0,
                    # wavelengths 6.3, 62.8, 628, 6283 vs 32 / 128: kept, smoothed, divided, divided
                    rope_scaling=dict(rope_type="llama3", factor=2.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=128),
                    rms_norm_eps=1e-5, attention_bias=False, tie_word_embeddings=False, qk_norm=False)),
    "hf_qwen3_tiny": dict(
        arch="qwen3", dtype="bf16", seed=11,
        config=dict(vocab_size=61, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                    rope_theta=1000000.0, rope_scaling=None,
                    rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=True, qk_norm=True)),
}

BOS, EOS = 1, 2
ST_DTYPES = {"fp32": ("F32", torch.float32), "bf16": ("BF16", torch.bfloat16)}


# ----------------------------------------------------------------------------- safetensors


def tensor_bytes(t: torch.Tensor, dtype: str) -> bytes:
    if dtype == "F32":
        return t.detach().float().contiguous().numpy().astype("<f4").tobytes()
    if dtype == "BF16":
        bits = t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy()
        return bits.astype("<i2").tobytes()
    raise ValueError(dtype)


def write_safetensors(path: str, tensors: list[tuple[str, torch.Tensor]], dtype: str) -> int:
    """Write one file; returns the number of tensor-data bytes."""
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, t in tensors:
        b = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return off


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = raw[base + b:base + end]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        else:
            raise SystemExit(f"{path}: {name} has unsupported dtype {e['dtype']}")
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


# ----------------------------------------------------------------------------- config.json


def hf_config_json(arch: str, cfg: LlamaConfig, torch_dtype: str) -> dict:
    d = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen3ForCausalLM"],
        "model_type": arch,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "rms_norm_eps": cfg.rms_norm_eps,
        "attention_bias": cfg.attention_bias,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "torch_dtype": torch_dtype,
        "use_cache": True,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
    }
    if arch == "llama":
        d.update(mlp_bias=False, pretraining_tp=1)
    else:
        d.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg.num_hidden_layers)
    return d


def config_from_json(c: dict) -> LlamaConfig:
    mt = c.get("model_type", "llama")
    if mt not in ("llama", "qwen3", "qwen2"):
        raise SystemExit(f"model_type {mt!r} is not supported (llama, qwen3, qwen2)")
    if c.get("hidden_act", "silu") != "silu":
        raise SystemExit(f"hidden_act {c['hidden_act']!r} is not supported")
    if c.get("mlp_bias", False):
        raise SystemExit("mlp_bias is not supported")
    if mt != "llama" and c.get("use_sliding_window", False):
        raise SystemExit("sliding-window attention is not supported")
    H = c["num_attention_heads"]
    return LlamaConfig(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"], num_attention_heads=H,
        num_key_value_heads=c.get("num_key_value_heads") or H,
        head_dim=c.get("head_dim") or c["hidden_size"] // H,
        max_position_embeddings=c.get("max_position_embeddings", 2048),
        rope_theta=float(c.get("rope_theta", 10000.0)), rope_scaling=c.get("rope_scaling"),
        rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
        # Qwen2 always has q/k/v biases (and none on o_proj).
        attention_bias=True if mt == "qwen2" else bool(c.get("attention_bias", False)),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        qk_norm=(mt == "qwen3"))


# ----------------------------------------------------------------------------- write / read


def reference_logits(model: LlamaForCausalLM, tokens: list[int]) -> np.ndarray:
    with torch.no_grad():
        logits, _ = model(torch.tensor([tokens], dtype=torch.long))
    return logits[0].float().numpy().astype("<f4")


def write_dir(out: str, arch: str, cfg: LlamaConfig, dtype: str, seed: int, tokens: list[int],
              shards: int) -> None:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    st_dtype, tdt = ST_DTYPES[dtype]
    # The stored weights are what the logits are computed from.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(tdt).float())
    named = list(model.named_parameters())  # lm_head absent when tied
    assert 2 <= shards <= len(named)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):  # stale shards of an earlier run
        if f.endswith(".safetensors") or f == "model.safetensors.index.json":
            os.remove(os.path.join(out, f))
    # Contiguous runs of about equal byte size, each non-empty.
    sizes = [p.numel() for _, p in named]
    total, groups, acc, start = sum(sizes), [], 0, 0
    for i, s in enumerate(sizes):
        acc += s
        left_tensors, left_groups = len(named) - i - 1, shards - len(groups) - 1
        if left_groups > 0 and (acc >= total * (len(groups) + 1) / shards or left_tensors == left_groups):
            groups.append(named[start:i + 1])
            start = i + 1
    groups.append(named[start:])
    assert len(groups) == shards and all(groups)
    weight_map, total_bytes = {}, 0
    for k, g in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total_bytes += write_safetensors(os.path.join(out, fname), g, st_dtype)
        for name, _ in g:
            weight_map[name] = fname
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total_bytes}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    cj = hf_config_json(arch, cfg, "float32" if dtype == "fp32" else "bfloat16")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": EOS}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump(tokens, f)
        f.write("\n")
    ref = reference_logits(model, tokens)
    ref.tofile(os.path.join(out, "logits.bin"))
    print(f"{out}: {arch} {dtype}, {len(named)} tensors in {shards} shards, {total_bytes} bytes of weights, "
          f"logits {ref.shape[0]}x{ref.shape[1]}, max |logit| {np.abs(ref).max():.6f}", file=sys.stderr)


def load_dir(d: str) -> LlamaForCausalLM:
    with open(os.path.join(d, "config.json")) as f:
        cfg = config_from_json(json.load(f))
    index = os.path.join(d, "model.safetensors.index.json")
    tensors: dict[str, torch.Tensor] = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for fn in files:
        for k, v in read_safetensors(os.path.join(d, fn)).items():
            if k in tensors:
                raise SystemExit(f"{k} appears in more than one file")
            tensors[k] = v
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:
        print("note: tied model stores lm_head.weight; ignored (embed_tokens is used)", file=sys.stderr)
        del tensors["lm_head.weight"]
    model = LlamaForCausalLM(cfg).float()
    want = dict(model.named_parameters())
    missing = sorted(set(want) - set(tensors))
    unexpected = sorted(k for k in set(tensors) - set(want) if not k.endswith("rotary_emb.inv_freq"))
    if missing or unexpected:
        raise SystemExit(f"{d}: missing tensors {missing}, unexpected tensors {unexpected}")
    with torch.no_grad():
        for name, p in want.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise SystemExit(f"{name}: shape {list(t.shape)}, expected {list(p.shape)}")
            p.copy_(t)
    return model.eval()


def parse_tokens(s: str | None) -> list[int] | None:
    return None if s is None else [int(x) for x in s.split(",") if x.strip()]


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
        ref = reference_logits(model, tokens)
        np.set_printoptions(precision=6, suppress=True, linewidth=160)
        print(f"tokens {tokens}")
        print(f"reference logits: {ref.shape[0]} positions x {ref.shape[1]} tokens, "
              f"max |logit| {np.abs(ref).max():.6f}, argmax {ref.argmax(-1).tolist()}")
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

    jobs = {a.preset: a.out} if a.preset else {p: os.path.join(a.goldens, p) for p in PRESETS}
    if a.preset and not a.out:
        ap.error("--preset needs --out")
    for name, out in jobs.items():
        pr = PRESETS[name]
        cfg = LlamaConfig(**pr["config"])
        toks = tokens if tokens is not None else DEFAULT_TOKENS
        if max(toks) >= cfg.vocab_size:
            ap.error(f"token id {max(toks)} >= vocab_size {cfg.vocab_size}")
        write_dir(out, pr["arch"], cfg, a.dtype or pr["dtype"], pr["seed"], toks, a.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
