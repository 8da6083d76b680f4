"""PyTorch throughput peer for parallm's CPU training benchmark.

Runs the same training loop as nanoGPT's train.py (without gradient
accumulation, eval, checkpointing or lr schedule) on the reference model in
``gpt_ref.py`` and reports training throughput:

    for it in range(warmup + iters):
        x, y = get_batch()                 # random windows, as nanoGPT
        logits, loss = model(x, y)
        loss.backward()
        clip_grad_norm_(params, 1.0)
        optimizer.step()                   # AdamW lr 1e-3, betas .9/.99, wd .1
        optimizer.zero_grad(set_to_none=True)

Only the last ``iters`` iterations are timed (wall clock, perf_counter);
batch sampling is inside the timed region, exactly as it is in nanoGPT's
loop.  tokens_per_s = iters * batch_size * block_size / elapsed.

Output contract: exactly one line of JSON on stdout, e.g.

    {"peer": "pytorch", "torch": "1.13.0", "tokens_per_s": 12345.6,
     "s_per_iter": 0.0622, "iters": 20, "threads": 1, "loss": 4.17}

Everything else (diagnostics, errors) goes to stderr; a failure exits
non-zero with no JSON on stdout.

Architecture: ``--arch gpt`` (default) is ``gpt_ref.GPT``; ``--arch llama``
is ``llama_ref.LlamaForCausalLM`` (RMSNorm, RoPE, SwiGLU, GQA) with
``--n-kv-head`` (default n_head), ``--head-dim`` (default n_embd / n_head),
``--intermediate-size`` (default 4 * n_embd), ``--rope-theta`` (10000),
``--qk-norm`` (Qwen3), ``--bias 1`` (q/k/v biases) and ``--untied`` (a
separate lm_head; default tied).
Its attention is ``F.scaled_dot_product_attention(is_causal=True)`` with the
KV heads repeated when the torch build has it (torch >= 2.0; the peer's best
setting, reported as ``"flash": 1``), else the explicit softmax(QK^T)V.
Same init, weight-decay grouping (dim >= 2) and loop as the GPT peer.

Data: ``--data`` is a nanoGPT-style ``train.bin`` (flat uint16 tokens; uint32 where meta.json beside it says so),
memory-mapped; without it tokens are uniform random in [0, vocab_size).
Threads: ``torch.set_num_threads(intra_threads)`` (set before any work);
inter-op threads are pinned to 1 since the loop has no inter-op parallelism.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="PyTorch GPT / Llama training throughput peer")
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--block_size", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=12)
    ap.add_argument("--vocab_size", type=int, default=65)
    ap.add_argument("--bias", type=int, choices=(0, 1), default=0)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="gpt: nanoGPT's dropout (attention, residual, embedding); with --flash inside SDPA")
    ap.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
    ap.add_argument("--n-kv-head", "--n_kv_head", dest="n_kv_head", type=int, default=None,
                    help="llama: key/value heads (default n_head)")
    ap.add_argument("--head-dim", "--head_dim", dest="head_dim", type=int, default=None,
                    help="llama: per-head width (default n_embd / n_head)")
    ap.add_argument("--intermediate-size", "--intermediate_size", dest="intermediate_size", type=int,
                    default=None, help="llama: SwiGLU width (default 4 * n_embd)")
    ap.add_argument("--rope-theta", "--rope_theta", dest="rope_theta", type=float, default=10000.0)
    ap.add_argument("--qk-norm", "--qk_norm", dest="qk_norm", action="store_true", help="llama: Qwen3 QK-norm")
    ap.add_argument("--untied", action="store_true", help="llama: separate lm_head (default tied)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    ap.add_argument("--intra_threads", type=int, default=1)
    ap.add_argument("--data", default=None, help="token file (nanoGPT train.bin; meta.json's dtype beside it)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"),
                    help="bf16: autocast to bfloat16 as nanoGPT does on GPUs")
    ap.add_argument("--profile", type=int, default=0,
                    help="after timing, profile this many steps and print the GPU kernels' times to stderr")
    ap.add_argument("--compile", type=int, choices=(0, 1), default=0, help="torch.compile the model")
    ap.add_argument("--flash", type=int, choices=(0, 1), default=0,
                    help="attention through F.scaled_dot_product_attention (nanoGPT's flash path)")
    args = ap.parse_args(argv)
    for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "vocab_size",
              "iters", "intra_threads"):
        if getattr(args, k) < 1:
            ap.error(f"--{k} must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if not 0.0 <= args.dropout < 1.0:
        ap.error("--dropout must be in [0, 1)")
    if args.arch == "gpt":
        if args.n_embd % args.n_head:
            ap.error("--n_embd must be divisible by --n_head")
    else:
        if args.n_kv_head is None:
            args.n_kv_head = args.n_head
        if args.head_dim is None:
            if args.n_embd % args.n_head:
                ap.error("--n_embd must be divisible by --n_head (or give --head-dim)")
            args.head_dim = args.n_embd // args.n_head
        if args.intermediate_size is None:
            args.intermediate_size = 4 * args.n_embd
        if args.n_kv_head < 1 or args.n_head % args.n_kv_head:
            ap.error("--n_head must be a multiple of --n-kv-head")
        if args.head_dim < 2 or args.head_dim % 2:
            ap.error("--head-dim must be even")
        if args.intermediate_size < 1:
            ap.error("--intermediate-size must be >= 1")
    if args.data is not None and not os.path.isfile(args.data):
        ap.error(f"--data {args.data}: no such file")
    return args


def log(msg: str) -> None:
    print(f"[bench_peer] {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)

    # Import torch only after argument parsing so --help / bad args are fast.
    import numpy as np
    import torch

    # Thread settings must precede any parallel work.
    torch.set_num_threads(args.intra_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already initialised (e.g. when imported into another process)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpt_ref import GPT, GPTConfig, configure_optimizers

    torch.manual_seed(args.seed)
    B, T = args.batch_size, args.block_size
    dev = torch.device(args.device)
    if dev.type == "cuda":  # nanoGPT's GPU settings
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.flash and args.arch == "gpt":
        import gpt_ref

        def flash_forward(self, x):
            Bq, Tq, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            q, k, v = (t.view(Bq, Tq, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
            return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(Bq, Tq, C)))

        gpt_ref.CausalSelfAttention.forward = flash_forward

    # ---- data ------------------------------------------------------------
    if args.data:
        # uint16 ids (nanoGPT's), or uint32 where the dataset's meta.json beside the file says so
        meta_path = os.path.join(os.path.dirname(os.path.abspath(args.data)), "meta.json")
        dtype_name = json.load(open(meta_path)).get("dtype", "uint16") if os.path.exists(meta_path) else "uint16"
        dtype = {"uint16": np.uint16, "uint32": np.uint32}[dtype_name]
        n_file = os.path.getsize(args.data) // np.dtype(dtype).itemsize
        if n_file < T + 1:  # one window needs T inputs plus one shifted target
            log(f"data file {args.data} has only {n_file} tokens (< block_size+1)")
            return 2
        data = np.memmap(args.data, dtype=dtype, mode="r", shape=(n_file,))
        # Cheap sanity check on a prefix (full scan would slow the start).
        head_max = int(data[: min(len(data), 1 << 20)].max())
        if head_max >= args.vocab_size:
            log(f"token id {head_max} in {args.data} >= vocab_size {args.vocab_size}")
            return 2
        # nanoGPT: ix = randint(len(data) - block_size); x = data[i:i+T], y = data[i+1:i+1+T]
        hi = len(data) - T

        def get_batch():
            ix = torch.randint(hi, (B,)).tolist()
            x = torch.from_numpy(np.stack([data[i:i + T].astype(np.int64) for i in ix]))
            y = torch.from_numpy(np.stack([data[i + 1:i + 1 + T].astype(np.int64) for i in ix]))
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    else:
        # Synthetic stream: a fixed random token buffer sampled with random
        # windows, so the per-iteration cost matches the file path.
        n_tok = max(1 << 16, 4 * (T + 1) * B)
        stream = torch.randint(args.vocab_size, (n_tok,), dtype=torch.int64).to(dev)
        hi = n_tok - T

        def get_batch():
            ix = torch.randint(hi, (B,))
            ix = ix.to(dev)
            offs = ix[:, None] + torch.arange(T, device=dev)[None, :]
            return stream[offs], stream[offs + 1]

    # ---- model / optimizer -------------------------------------------------
    if args.arch == "gpt":
        cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                        block_size=T, vocab_size=args.vocab_size, dropout=args.dropout,
                        bias=bool(args.bias))
        model = GPT(cfg).to(dev)
        n_params = model.num_params()
        flash = args.flash
    else:
        from llama_ref import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=args.vocab_size, hidden_size=args.n_embd,
                          intermediate_size=args.intermediate_size, num_hidden_layers=args.n_layer,
                          num_attention_heads=args.n_head, num_key_value_heads=args.n_kv_head,
                          head_dim=args.head_dim, max_position_embeddings=T, rope_theta=args.rope_theta,
                          attention_bias=bool(args.bias), tie_word_embeddings=not args.untied,
                          qk_norm=args.qk_norm)
        flash = int(hasattr(torch.nn.functional, "scaled_dot_product_attention"))
        model = LlamaForCausalLM(cfg, attn_impl="sdpa" if flash else "eager").to(dev)
        n_params = model.num_params()
    model.train()
    optimizer = configure_optimizers(model, weight_decay=0.1, learning_rate=args.lr,
                                     betas=(0.9, 0.99), eps=1e-8)
    params = list(model.parameters())
    if dev.type == "cuda":  # nanoGPT: fused AdamW on the GPU
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in optimizer.param_groups]
        optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99), eps=1e-8, fused=True)
    fwd = torch.compile(model) if args.compile else model
    import contextlib
    amp = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if args.dtype == "bf16"
           else contextlib.nullcontext())
    log(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{'' if args.arch == 'gpt' else 'llama, '}params {n_params / 1e6:.3f}M "
        f"({'non-embedding' if args.arch == 'gpt' else 'all'}), "
        f"data {'random' if not args.data else args.data}")

    def train_step():
        x, y = get_batch()
        with amp:
            _, loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        train_step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    sync()
    t0 = time.perf_counter()
    loss = None
    for _ in range(args.iters):
        loss = train_step()
    sync()
    elapsed = time.perf_counter() - t0
    last_loss = float(loss.item())  # CPU: no async work outstanding
    if args.profile > 0:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            for _ in range(args.profile):
                train_step()
            sync()
        key = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        log(f"profile of {args.profile} steps (times are totals over them):")
        log(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=70))

    result = {
        "peer": "pytorch",
        "torch": torch.__version__,
        "tokens_per_s": args.iters * B * T / elapsed,
        "s_per_iter": elapsed / args.iters,
        "iters": args.iters,
        "threads": args.intra_threads,
        "loss": last_loss,
        "device": args.device,
        "dtype": args.dtype,
        "compile": args.compile,
        "flash": flash,
        "dropout": args.dropout,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
