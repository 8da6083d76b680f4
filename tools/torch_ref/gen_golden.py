"""Generate golden reference data for parallm's C++ GPT tests.

Usage::

    /usr/bin/python3 tools/torch_ref/gen_golden.py --out tests/golden

For each case (``gpt_tiny_bias`` and ``gpt_tiny_nobias``) this writes a
directory with two files:

``data.bin``
    Raw little-endian tensors concatenated back to back.  Every tensor starts
    at a byte offset that is a multiple of 64; the gaps are zero bytes.
    dtypes: ``f32`` (IEEE float32) and ``i32`` (int32), row-major (C order).

``manifest.json``
    ``{"format": 1, "config": {...}, "tensors": [{"name", "dtype", "shape",
    "offset"}, ...]}``.  Offsets are bytes into data.bin; the byte size of a
    tensor is ``prod(shape) * 4``.

Contents (per case, model = tools/torch_ref/gpt_ref.py GPT):

* ``param/<name>``       initial parameters in torch layout (Linear weight is
                         [out, in]); lm_head.weight is omitted (tied to wte).
* ``x``, ``y``           i32 [B, T] input tokens / targets.
* ``logits``             f32 [B, T, V] of forward(x).
* ``loss``               f32 [1] mean cross-entropy of forward(x, y).
* ``grad/<name>``        d loss / d param (wte's includes the lm_head use).
* ``train_x``, ``train_y`` i32 [S, B, T] one batch per training step.
* ``train_losses``       f32 [S] loss of step k, computed *before* its update.
* ``train_grad_norms``   f32 [S] global L2 grad norm of step k before
                         clipping (extra, for debugging clip/AdamW).
* ``train_final/<name>`` parameters after the S steps.

Training step k (starting again from the initial params, fresh AdamW
state): forward(train_x[k], train_y[k]) -> backward -> clip_grad_norm_(1.0)
(torch scales every grad by min(1, max_norm / (norm + 1e-6))) -> AdamW step
(constant lr, decoupled weight decay on dim>=2 params only, see
gpt_ref.GPT.configure_optimizers) -> zero grads.

Determinism: torch.manual_seed(SEED), one intra-op thread, float32 only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import GPT, GPTConfig, configure_optimizers, exported_named_parameters  # noqa: E402

SEED = 1337
ALIGN = 64

# Shared hyper-parameters of both cases.
BASE = dict(n_layer=2, n_head=3, n_embd=24, block_size=16, vocab_size=37, dropout=0.0)
BATCH = 3
SEQ = 13  # deliberately < block_size
LR = 3e-3
BETA1, BETA2 = 0.9, 0.95
EPS = 1e-8
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
TRAIN_STEPS = 10

CASES = {
    "gpt_tiny_bias": dict(BASE, bias=True),
    "gpt_tiny_nobias": dict(BASE, bias=False),
}


class BlobWriter:
    """Accumulates tensors into one 64-byte-aligned little-endian blob."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.entries: list[dict] = []
        self.names: set[str] = set()

    def add(self, name: str, t: torch.Tensor) -> None:
        assert name not in self.names, f"duplicate tensor name {name}"
        self.names.add(name)
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.float32:
            arr, dtype = t.numpy().astype("<f4", copy=False), "f32"
        elif t.dtype in (torch.int32, torch.int64):
            # Token ids are generated as int64 (torch's index type); they are
            # all < vocab_size so the narrowing is exact.
            arr, dtype = t.to(torch.int32).numpy().astype("<i4", copy=False), "i32"
        else:
            raise TypeError(f"{name}: unsupported dtype {t.dtype} (float64 is not allowed)")
        pad = (-len(self.buf)) % ALIGN
        self.buf += b"\0" * pad
        offset = len(self.buf)
        self.buf += arr.tobytes(order="C")
        self.entries.append({"name": name, "dtype": dtype, "shape": list(t.shape), "offset": offset})

    def write(self, out_dir: str, config: dict) -> None:
        os.makedirs(out_dir, exist_ok=True)
        # Pad the tail too so the file size is a multiple of 64 as well.
        self.buf += b"\0" * ((-len(self.buf)) % ALIGN)
        with open(os.path.join(out_dir, "data.bin"), "wb") as f:
            f.write(self.buf)
        # Hand-laid-out JSON (still strict JSON): config on one line, then one
        # tensor per line, so the file diffs well and is trivial to eyeball.
        lines = ['{"format": 1,', ' "config": ' + json.dumps(config) + ",", ' "tensors": [']
        body = [json.dumps(e) for e in self.entries]
        lines += ["  " + b + ("," if i + 1 < len(body) else "") for i, b in enumerate(body)]
        lines += [" ]", "}"]
        text = "\n".join(lines) + "\n"
        json.loads(text)  # self-check
        with open(os.path.join(out_dir, "manifest.json"), "w") as f:
            f.write(text)


def generate_case(name: str, cfg: dict, out_root: str) -> dict:
    """Build one golden case; returns its manifest config for logging."""
    torch.manual_seed(SEED)
    gcfg = GPTConfig(**cfg)
    model = GPT(gcfg).float()
    model.train()  # dropout is 0, so train/eval are identical; train like C++

    init_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    blob = BlobWriter()

    # --- initial parameters ------------------------------------------------
    for pname, p in exported_named_parameters(model):
        blob.add(f"param/{pname}", p)

    # --- one forward/backward ---------------------------------------------
    V = gcfg.vocab_size
    x = torch.randint(0, V, (BATCH, SEQ), dtype=torch.long)
    y = torch.randint(0, V, (BATCH, SEQ), dtype=torch.long)
    logits, loss = model(x, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    blob.add("x", x)
    blob.add("y", y)
    blob.add("logits", logits)
    blob.add("loss", loss.detach().reshape(1))
    for pname, p in exported_named_parameters(model):
        assert p.grad is not None, pname
        blob.add(f"grad/{pname}", p.grad)

    # --- short training run from the same initial parameters --------------
    train_x = torch.randint(0, V, (TRAIN_STEPS, BATCH, SEQ), dtype=torch.long)
    train_y = torch.randint(0, V, (TRAIN_STEPS, BATCH, SEQ), dtype=torch.long)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init_state[n])
    model.zero_grad(set_to_none=True)
    opt = configure_optimizers(model, WEIGHT_DECAY, LR, (BETA1, BETA2), EPS)
    params = [p for p in model.parameters()]
    losses = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    gnorms = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    for k in range(TRAIN_STEPS):
        _, l = model(train_x[k], train_y[k])
        losses[k] = l.detach()
        l.backward()
        gnorms[k] = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
    blob.add("train_x", train_x)
    blob.add("train_y", train_y)
    blob.add("train_losses", losses)
    blob.add("train_grad_norms", gnorms)
    for pname, p in exported_named_parameters(model):
        blob.add(f"train_final/{pname}", p)

    config = {
        "n_layer": gcfg.n_layer, "n_head": gcfg.n_head, "n_embd": gcfg.n_embd,
        "block_size": gcfg.block_size, "vocab_size": gcfg.vocab_size, "bias": gcfg.bias,
        "batch_size": BATCH, "seq_len": SEQ,
        "lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP, "train_steps": TRAIN_STEPS,
        "seed": SEED,
    }
    blob.write(os.path.join(out_root, name), config)
    print(f"{name}: params={model.num_params(non_embedding=False)} "
          f"(non-emb {model.num_params()}), loss0={loss.item():.6f} "
          f"(ln V = {math.log(V):.6f}), train_losses={[round(v, 4) for v in losses.tolist()]}, "
          f"data.bin={len(blob.buf)} bytes", file=sys.stderr)
    return config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output root, e.g. tests/golden")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    for name, cfg in CASES.items():
        generate_case(name, cfg, args.out)


if __name__ == "__main__":
    main()
