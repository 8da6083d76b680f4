#!/usr/bin/env python3
"""Logits of a Hugging Face GPT-2 directory by the PyTorch reference model.

Reads ``config.json`` and ``model.safetensors`` by the format's documented
layout (8 bytes of little-endian header length, a JSON header of
``name -> {dtype, shape, data_offsets}``, then the raw little-endian data):
no safetensors or transformers package is needed, and none of parallm's code
is used. The four Conv1D weights (``attn.c_attn``, ``attn.c_proj``,
``mlp.c_fc``, ``mlp.c_proj``, stored [in, out]) are transposed into
``gpt_ref.GPT``'s nn.Linear [out, in]; the head is the token table; GELU is
the tanh form for ``gelu_new`` and the exact one for ``gelu``.

    hf_logits.py DIR --ids 15496,11,616 [--compare parallm.bin] [--out golden.bin]

``--compare`` reads parallm's logits (``parallm sample --ckpt hf:DIR
--logits FILE``: float32, [tokens, vocab]) and prints the largest relative
difference, max|a-b| / max|b|, and exits 1 above ``--tol`` (1e-5);
``--out`` writes the reference's logits in the same layout (a golden file).
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
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import GPT, GPTConfig  # noqa: E402

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def read_safetensors(path: str) -> dict[str, np.ndarray]:
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
            raise SystemExit(f"{path}: {name} is {e['dtype']}")
        out[name] = a.reshape(e["shape"]).copy()
    return out


def load(dir_: str) -> GPT:
    cfg = json.load(open(os.path.join(dir_, "config.json")))
    tensors = read_safetensors(os.path.join(dir_, "model.safetensors"))
    c = GPTConfig(block_size=cfg.get("n_positions", cfg.get("n_ctx")), vocab_size=cfg["vocab_size"],
                  n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_embd=cfg["n_embd"], dropout=0.0, bias=True)
    model = GPT(c)
    if cfg.get("activation_function", "gelu_new") != "gelu":
        for block in model.transformer.h:
            block.mlp.gelu = nn.GELU(approximate="tanh")
    state = {}
    for name, a in tensors.items():
        bare = name[len("transformer."):] if name.startswith("transformer.") else name
        if bare.endswith(".attn.bias") or bare.endswith(".attn.masked_bias") or bare == "lm_head.weight":
            continue
        if bare.endswith(CONV1D):
            a = a.T.copy()
        state["transformer." + bare] = torch.from_numpy(a)
    state["lm_head.weight"] = state["transformer.wte.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"missing {missing}, unexpected {unexpected}")
    return model.eval()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--ids", required=True, help="comma-separated token ids of the prompt")
    p.add_argument("--compare", help="parallm's logits file (float32 [tokens, vocab])")
    p.add_argument("--out", help="write the reference's logits here")
    p.add_argument("--tol", type=float, default=1e-5)
    a = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = load(a.dir)
    ids = torch.tensor([[int(x) for x in a.ids.split(",")]], dtype=torch.long)
    with torch.no_grad():
        logits, _ = model(ids)
    ref = logits[0].numpy().astype(np.float32)
    print(f"reference logits: {ref.shape[0]} positions x {ref.shape[1]} tokens, max |logit| {np.abs(ref).max():.4f}")
    if a.out:
        ref.tofile(a.out)
    if a.compare:
        got = np.fromfile(a.compare, dtype="<f4").reshape(ref.shape)
        rel = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
        same_argmax = bool((got.argmax(-1) == ref.argmax(-1)).all())
        print(f"parallm vs reference: max relative difference {rel:.3g} (tolerance {a.tol:g}), "
              f"same argmax at every position: {same_argmax}")
        return 0 if rel <= a.tol else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
