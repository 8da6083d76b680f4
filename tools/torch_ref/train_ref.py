"""nanoGPT-style training run of the reference model, for accuracy comparisons.

Trains ``gpt_ref.GPT`` on a prepared character dataset (train.bin / val.bin,
uint16) exactly as nanoGPT's train.py does for its CPU Shakespeare config:
random windows per step (torch.randint), AdamW (decay on dim>=2 params),
linear warmup + cosine decay, grad clip, no dropout. After max_iters steps it evaluates
train and val loss over ``--eval_iters`` random batches and prints one JSON
line, so a parallm run can be compared against PyTorch on this machine:

    /usr/bin/python3 tools/torch_ref/train_ref.py --data data/shakespeare_char
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import GPT, GPTConfig  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--block_size", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=12)
    ap.add_argument("--max_iters", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min_lr", type=float, default=1e-4)
    ap.add_argument("--warmup_iters", type=int, default=100)
    ap.add_argument("--lr_decay_iters", type=int, default=2000)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--eval_iters", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval_interval", type=int, default=0,
                    help="also evaluate every N steps and fetch batches in nanoGPT's order (one batch "
                         "ahead), so torch's random stream, and with it the run, is nanoGPT's own: "
                         "250 with --eval_iters 20 replays its CPU command for a given seed")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    dtype = {"uint16": np.uint16, "uint32": np.uint32}[meta.get("dtype", "uint16")]  # uint32 past 65,536 tokens
    train = np.memmap(os.path.join(a.data, "train.bin"), dtype=dtype, mode="r")
    val = np.memmap(os.path.join(a.data, "val.bin"), dtype=dtype, mode="r")
    vocab = meta["vocab_size"]
    model = GPT(GPTConfig(block_size=a.block_size, vocab_size=vocab, n_layer=a.n_layer, n_head=a.n_head,
                          n_embd=a.n_embd, dropout=0.0, bias=False))
    opt = model.configure_optimizers(0.1, a.lr, (0.9, a.beta2))

    def batch(data):
        ix = torch.randint(len(data) - a.block_size, (a.batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + a.block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + a.block_size].astype(np.int64)) for i in ix])
        return x, y

    def lr_at(it):
        if it < a.warmup_iters:
            return a.lr * (it + 1) / (a.warmup_iters + 1)
        if it > a.lr_decay_iters:
            return a.min_lr
        r = (it - a.warmup_iters) / (a.lr_decay_iters - a.warmup_iters)
        return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (a.lr - a.min_lr)

    def evaluate():
        model.eval()
        res = {}
        with torch.no_grad():
            for name, data in (("train", train), ("val", val)):
                res[name + "_loss"] = float(np.mean([model(*batch(data))[1].item() for _ in range(a.eval_iters)]))
        model.train()
        return res

    t0 = time.time()
    # max_iters steps, then the evaluation: nanoGPT evaluates at iter_num ==
    # max_iters before that iteration's step, i.e. after max_iters updates.
    x, y = batch(train) if a.eval_interval else (None, None)
    for it in range(a.max_iters):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        if a.eval_interval and it % a.eval_interval == 0:
            print(f"iter {it}: {evaluate()}", file=sys.stderr, flush=True)
        if not a.eval_interval:
            x, y = batch(train)
        _, loss = model(x, y)
        if a.eval_interval:
            x, y = batch(train)  # nanoGPT fetches the next batch before backward
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it % 250 == 0:
            print(f"iter {it}: loss {loss.item():.4f} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    out = evaluate()
    out.update({"peer": "pytorch", "max_iters": a.max_iters, "seed": a.seed, "eval_iters": a.eval_iters,
                "eval_interval": a.eval_interval})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
