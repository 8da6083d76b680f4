"""Generate golden reference data for parallm's C++ Llama / Qwen3 tests.

Usage::

    /usr/bin/python3 tools/torch_ref/gen_golden_llama.py --out tests/golden

Same file format (``manifest.json`` + ``data.bin``, written by
``gen_golden.BlobWriter``), tensor names and training recipe as
``gen_golden.py``'s GPT cases; the model is ``llama_ref.LlamaForCausalLM``
with Hugging Face parameter names.  Extra tensors: ``rope_cos`` and
``rope_sin`` [T, D/2], the cos / sin of ``t * inv_freq[j]`` (before the
cat of the two halves) so a port can check its frequency table directly.

For every case with llama3 ``rope_scaling`` the script asserts (and prints)
that the frequencies fall in all three regions of the rule (kept, smoothed,
divided).

``--noise-floor`` also redoes every case in float64 from the same inputs and
prints the fp32 goldens' distance to it (their rounding-noise floor; see
tests/golden/README.md); without ``--out`` nothing is written.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import BlobWriter  # noqa: E402
from gpt_ref import configure_optimizers  # noqa: E402
from llama_ref import (LlamaConfig, LlamaForCausalLM, base_inv_freq,  # noqa: E402
                       llama3_inv_freq, rope_cos_sin_half)

SEED = 1337
LR = 3e-3
BETA1, BETA2 = 0.9, 0.95
EPS = 1e-8
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
TRAIN_STEPS = 10
BLOCK = 16

# (arch, model config, batch, seq)
CASES = {
    "llama_tiny_mqa": ("llama", dict(
        vocab_size=37, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=BLOCK,
        rope_theta=10000.0,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=1024),
        rms_norm_eps=1e-5, attention_bias=False, tie_word_embeddings=False, qk_norm=False), 3, 13),
    "llama_tiny_gqa2_tied": ("llama", dict(
        vocab_size=53, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=BLOCK,
        rope_theta=500000.0, rope_scaling=None,
        rms_norm_eps=1e-5, attention_bias=False, tie_word_embeddings=True, qk_norm=False), 2, 12),
    "qwen3_tiny_kv4": ("qwen3", dict(
        vocab_size=37, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8, max_position_embeddings=BLOCK,
        rope_theta=1000000.0, rope_scaling=None,
        rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=False, qk_norm=True), 3, 11),
    "qwen3_tiny_gqa2_tied": ("qwen3", dict(
        vocab_size=53, hidden_size=24, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=8, max_position_embeddings=BLOCK,
        rope_theta=10000.0,
        rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=2.0, high_freq_factor=8.0,
                          original_max_position_embeddings=256),
        rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=True, qk_norm=True), 2, 13),
    "llama_tiny_bias": ("llama", dict(
        vocab_size=37, hidden_size=32, intermediate_size=36, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=BLOCK,
        # A small theta / orig so that every rotation angle is sizeable: with a
        # k bias, the dims whose angles are ~0 get a ~zero (noise) gradient
        # (softmax is shift-invariant), which Adam turns into noisy steps.
        rope_theta=1000.0,
        rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=256),
        rms_norm_eps=1e-5, attention_bias=True, tie_word_embeddings=False, qk_norm=False), 3, 12),
}


def check_three_regions(name: str, cfg: LlamaConfig) -> None:
    """Assert the llama3 rule hits kept, smoothed and divided frequencies."""
    rs = cfg.rope_scaling
    inv = base_inv_freq(cfg.rope_theta, cfg.head_dim)
    scaled, regions = llama3_inv_freq(inv, rs)
    wl = (2 * math.pi / inv).tolist()
    orig = rs["original_max_position_embeddings"]
    print(f"{name}: llama3 rope (theta {cfg.rope_theta:g}, D {cfg.head_dim}, factor {rs['factor']:g}, "
          f"low/high_freq_factor {rs['low_freq_factor']:g}/{rs['high_freq_factor']:g}, orig {orig}: "
          f"high_wl {orig / rs['high_freq_factor']:g}, low_wl {orig / rs['low_freq_factor']:g})",
          file=sys.stderr)
    for j, (w, r, a, b) in enumerate(zip(wl, regions, inv.tolist(), scaled.tolist())):
        print(f"  j={j}: wavelen {w:10.3f}  {r:8s} inv_freq {a:.8g} -> {b:.8g} (ratio {b / a:.6g})",
              file=sys.stderr)
    missing = {"kept", "smoothed", "divided"} - set(regions)
    assert not missing, f"{name}: llama3 rope scaling misses region(s) {sorted(missing)}"


def load(model: LlamaForCausalLM, state: dict) -> None:
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])
    model.zero_grad(set_to_none=True)


def forward_backward(model: LlamaForCausalLM, x: torch.Tensor, y: torch.Tensor):
    logits, loss = model(x, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    return logits, loss


def train(model: LlamaForCausalLM, train_x: torch.Tensor, train_y: torch.Tensor):
    """TRAIN_STEPS AdamW steps with clipping; returns (losses, grad norms) in fp32."""
    opt = configure_optimizers(model, WEIGHT_DECAY, LR, (BETA1, BETA2), EPS)
    params = list(model.parameters())
    losses = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    gnorms = torch.empty(TRAIN_STEPS, dtype=torch.float32)
    for k in range(TRAIN_STEPS):
        _, l = model(train_x[k], train_y[k])
        losses[k] = l.detach()
        l.backward()
        gnorms[k] = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, gnorms


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want|, as tests/model/test_golden.cpp measures."""
    want = want.detach().double()
    return ((got.detach().double() - want).abs().max() / want.abs().max()).item()


def report_noise_floor(name, cfg, init_state, x, y, train_x, train_y, logits, loss, blob, model,
                       losses, gnorms) -> None:
    """Redo the case in float64 from the same fp32 inputs and print how far the
    fp32 goldens are from it: the rounding-noise floor a correct fp32 port sees."""
    m64 = LlamaForCausalLM(cfg).double()  # after every draw of this case: RNG use is harmless
    m64.inv_freq = m64.inv_freq.double()  # the same fp32 frequencies, widened
    state64 = {n: t.double() for n, t in init_state.items()}
    load(m64, state64)
    l64, s64 = forward_backward(m64, x, y)
    grads = {n: p.grad.clone() for n, p in m64.named_parameters()}
    out = [f"logits {rel_err(logits, l64):.1e}", f"loss {abs(loss.item() - s64.item()) / s64.item():.1e}"]
    gw = max((rel_err(blob_tensor(blob, 'grad/' + n), grads[n]), n) for n in grads)
    out.append(f"grad {gw[0]:.1e} ({gw[1]})")
    load(m64, state64)
    loss64, gn64 = train(m64, train_x, train_y)
    out.append(f"train_losses {rel_err(losses, loss64):.1e}, train_grad_norms {rel_err(gnorms, gn64):.1e}")
    fin = sorted(((rel_err(p32, p64), (p32.detach().double() - p64.detach()).abs().max().item(), n)
                  for (n, p32), (_, p64) in zip(model.named_parameters(), m64.named_parameters())),
                 reverse=True)
    out.append("train_final worst: " + ", ".join(f"{r:.1e} (abs {a:.1e}) {n}" for r, a, n in fin[:3]))
    print(f"{name}: fp32 vs fp64 rel. error: " + "; ".join(out), file=sys.stderr)


def blob_tensor(blob: BlobWriter, name: str) -> torch.Tensor:
    import numpy as np
    e = next(e for e in blob.entries if e["name"] == name)
    n = int(np.prod(e["shape"]))
    a = np.frombuffer(bytes(blob.buf[e["offset"]:e["offset"] + 4 * n]), dtype="<f4")
    return torch.from_numpy(a.reshape(e["shape"]).copy())


def generate_case(name: str, arch: str, mcfg: dict, batch: int, seq: int, out_root: str | None,
                  noise_floor: bool = False) -> None:
    torch.manual_seed(SEED)
    cfg = LlamaConfig(**mcfg)
    assert seq < cfg.max_position_embeddings
    if cfg.rope_scaling is not None:
        check_three_regions(name, cfg)
    model = LlamaForCausalLM(cfg).float()
    model.train()
    init_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    blob = BlobWriter()
    for pname, p in model.named_parameters():
        blob.add(f"param/{pname}", p)

    V = cfg.vocab_size
    x = torch.randint(0, V, (batch, seq), dtype=torch.long)
    y = torch.randint(0, V, (batch, seq), dtype=torch.long)
    logits, loss = forward_backward(model, x, y)
    blob.add("x", x)
    blob.add("y", y)
    blob.add("logits", logits)
    blob.add("loss", loss.detach().reshape(1))
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        blob.add(f"grad/{pname}", p.grad)

    train_x = torch.randint(0, V, (TRAIN_STEPS, batch, seq), dtype=torch.long)
    train_y = torch.randint(0, V, (TRAIN_STEPS, batch, seq), dtype=torch.long)
    load(model, init_state)
    losses, gnorms = train(model, train_x, train_y)
    blob.add("train_x", train_x)
    blob.add("train_y", train_y)
    blob.add("train_losses", losses)
    blob.add("train_grad_norms", gnorms)
    for pname, p in model.named_parameters():
        blob.add(f"train_final/{pname}", p)
    cos, sin = rope_cos_sin_half(cfg, seq)
    blob.add("rope_cos", cos)
    blob.add("rope_sin", sin)

    rs = cfg.rope_scaling
    config = {
        "arch": arch, "n_layer": cfg.num_hidden_layers, "n_head": cfg.num_attention_heads,
        "n_kv_head": cfg.num_key_value_heads, "n_embd": cfg.hidden_size, "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size, "vocab_size": V,
        "block_size": cfg.max_position_embeddings, "rope_theta": cfg.rope_theta,
        "rope_scaling": None if rs is None else {
            "rope_type": "llama3", "factor": rs["factor"], "low_freq_factor": rs["low_freq_factor"],
            "high_freq_factor": rs["high_freq_factor"],
            "original_max_position_embeddings": rs["original_max_position_embeddings"]},
        "rms_norm_eps": cfg.rms_norm_eps, "qk_norm": cfg.qk_norm, "attention_bias": cfg.attention_bias,
        "tie_embeddings": cfg.tie_word_embeddings,
        "batch_size": batch, "seq_len": seq,
        "lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP, "train_steps": TRAIN_STEPS,
        "seed": SEED,
    }
    if out_root is not None:
        blob.write(os.path.join(out_root, name), config)
    if noise_floor:
        report_noise_floor(name, cfg, init_state, x, y, train_x, train_y, logits, loss, blob, model,
                           losses, gnorms)
    print(f"{name}: params={model.num_params()}, loss0={loss.item():.6f} (ln V = {math.log(V):.6f}), "
          f"train_losses={[round(v, 4) for v in losses.tolist()]}, data.bin={len(blob.buf)} bytes",
          file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output root, e.g. tests/golden (omit with --noise-floor to write nothing)")
    ap.add_argument("--noise-floor", action="store_true",
                    help="also redo each case in float64 and print the fp32 goldens' rounding-noise floor")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    args = ap.parse_args()
    if args.out is None and not args.noise_floor:
        ap.error("--out is required (unless --noise-floor)")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    for name, (arch, mcfg, batch, seq) in CASES.items():
        if args.case and name not in args.case:
            continue
        generate_case(name, arch, mcfg, batch, seq, args.out, args.noise_floor)


if __name__ == "__main__":
    main()
