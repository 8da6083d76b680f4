"""PyTorch reference of Hugging Face's Llama / Qwen3 causal LM (from scratch).

Written independently from the published semantics of the Hugging Face
``LlamaForCausalLM`` and ``Qwen3ForCausalLM`` models (no code taken from
transformers).  Used by ``gen_golden_llama.py`` (golden files for the C++
tests), ``llama_hf_dir.py`` (HF model directories and their logits) and
``bench_peer.py --arch llama`` (CPU throughput peer).

Architecture (pre-norm decoder, no position embedding table)::

    x = embed_tokens[idx]
    for each layer:
        h = x + o_proj(attn(input_layernorm(x)))
        x = h + down_proj(silu(gate_proj(n)) * up_proj(n)),  n = post_attention_layernorm(h)
    logits = lm_head(norm(x))          # lm_head == embed_tokens when tied

Parameter names and registration order (== the order of the golden files'
tensors and of parallm's layout)::

    model.embed_tokens.weight                 [V, C]
    per layer i, prefix model.layers.{i}.:
      input_layernorm.weight                  [C]
      self_attn.q_proj.weight                 [H*D, C]   (+ .bias [H*D]  if attention_bias)
      self_attn.k_proj.weight                 [KV*D, C]  (+ .bias [KV*D] if attention_bias)
      self_attn.v_proj.weight                 [KV*D, C]  (+ .bias [KV*D] if attention_bias)
      self_attn.o_proj.weight                 [C, H*D]   (never a bias, as Qwen2)
      self_attn.q_norm.weight                 [D]        (qk_norm only)
      self_attn.k_norm.weight                 [D]        (qk_norm only)
      post_attention_layernorm.weight         [C]
      mlp.gate_proj.weight                    [I, C]
      mlp.up_proj.weight                      [I, C]
      mlp.down_proj.weight                    [C, I]
    model.norm.weight                         [C]
    lm_head.weight                            [V, C]     (untied only)

Semantics:

* ``nn.Linear`` weights are [out, in]: ``y = x W^T (+ b)``.
* RMSNorm: statistics in fp32, ``x * rsqrt(mean(x^2) + eps)``, cast back to
  the input dtype, then multiplied by ``weight`` (no bias, no "1 +").
* RoPE, rotate-half layout: ``inv_freq[j] = 1 / theta^(2j/D)`` (fp32),
  optionally rescaled by the llama3 rule (:func:`llama3_inv_freq`);
  ``angle[t, j] = t * inv_freq[j]``; ``cos``/``sin`` of ``cat(angle,
  angle)``; ``rot(x) = x*cos + rotate_half(x)*sin`` with
  ``rotate_half([x1 | x2]) = [-x2 | x1]`` (halves of the head, not even/odd
  pairs).  Positions are 0..T-1.  Attention scaling factor 1.
* Qwen3 (``qk_norm``): per-head RMSNorm over D (weights [D] shared by all
  heads, same eps) on q and k *before* RoPE.
* GQA: query head h reads kv head ``h // (H / KV)``.
* Scores ``(q k^T) * D^-0.5``, causal mask, softmax in fp32, dropout 0.
* MLP: ``down(silu(gate(x)) * up(x))``.
* Loss: mean cross-entropy of ``logits`` against the given targets (no
  internal shift; targets are passed explicitly as in nanoGPT).

Initialisation (deterministic given ``torch.manual_seed``), parameters
visited in registration order: every Linear weight and the embedding
``normal(0, 0.02)``, biases zero, RMSNorm weights ``1 + 0.1*normal(0, 1)``
(not ones, so that their gradients are exercised by the goldens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    """Hyper-parameters, field names as in a Hugging Face config.json."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: Optional[int] = None  # None -> num_attention_heads
    head_dim: Optional[int] = None  # None -> hidden_size // num_attention_heads
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    # None or {"rope_type": "llama3", "factor", "low_freq_factor",
    # "high_freq_factor", "original_max_position_embeddings"}
    rope_scaling: Optional[dict] = None
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    qk_norm: bool = False  # True for Qwen3

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            assert self.hidden_size % self.num_attention_heads == 0
            self.head_dim = self.hidden_size // self.num_attention_heads
        assert self.num_attention_heads % self.num_key_value_heads == 0, \
            "num_attention_heads must be a multiple of num_key_value_heads"
        assert self.head_dim % 2 == 0, "RoPE needs an even head_dim"
        if self.rope_scaling is not None:
            rs = dict(self.rope_scaling)
            kind = rs.get("rope_type", rs.get("type"))
            if kind == "default":
                self.rope_scaling = None
            elif kind != "llama3":
                raise ValueError(f"unsupported rope_scaling type {kind!r} (only llama3)")


# --------------------------------------------------------------------------- RoPE


def base_inv_freq(theta: float, head_dim: int) -> torch.Tensor:
    """``1 / theta^(2j/D)`` for j = 0..D/2-1, computed in fp32 like HF."""
    expo = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (theta ** expo)


def llama3_inv_freq(inv_freq: torch.Tensor, rope_scaling: dict) -> tuple[torch.Tensor, list[str]]:
    """Apply Llama 3.1's frequency rescaling; also return each frequency's region.

    ``wavelen = 2*pi / inv_freq``; with ``orig = original_max_position_embeddings``,
    ``high_wl = orig / high_freq_factor`` and ``low_wl = orig / low_freq_factor``:

    * ``wavelen < high_wl``  -> kept (high frequency);
    * ``wavelen > low_wl``   -> ``inv_freq / factor`` (low frequency);
    * otherwise              -> ``(1 - s) * inv_freq / factor + s * inv_freq``
      with ``s = (orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)``.

    All arithmetic in fp32 tensors (python scalars as the other operand).
    """
    factor = float(rope_scaling["factor"])
    lff = float(rope_scaling["low_freq_factor"])
    hff = float(rope_scaling["high_freq_factor"])
    orig = float(rope_scaling["original_max_position_embeddings"])
    low_wl = orig / lff
    high_wl = orig / hff
    wavelen = 2 * math.pi / inv_freq
    divided = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - lff) / (hff - lff)
    smoothed = (1 - smooth) * divided / factor + smooth * divided
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    out = torch.where(medium, smoothed, divided)
    regions = ["kept" if w < high_wl else "divided" if w > low_wl else "smoothed"
               for w in wavelen.tolist()]
    return out, regions


def rope_inv_freq(config: LlamaConfig) -> torch.Tensor:
    inv = base_inv_freq(config.rope_theta, config.head_dim)
    if config.rope_scaling is not None:
        inv, _ = llama3_inv_freq(inv, config.rope_scaling)
    return inv


def rope_cos_sin_half(config: LlamaConfig, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``t * inv_freq[j]``, [T, D/2] fp32 (before the cat)."""
    pos = torch.arange(T, dtype=torch.int64).float()
    ang = torch.outer(pos, rope_inv_freq(config))
    return ang.cos(), ang.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, n, T, D]; cos/sin [T, D] (already cat'ed)."""
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------- modules


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dt)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        C, H, KV, D = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.H, self.KV, self.D = H, KV, D
        b = config.attention_bias
        # Registration order matters (golden tensor order): q, k, v, o, q_norm, k_norm.
        self.q_proj = nn.Linear(C, H * D, bias=b)
        self.k_proj = nn.Linear(C, KV * D, bias=b)
        self.v_proj = nn.Linear(C, KV * D, bias=b)
        self.o_proj = nn.Linear(H * D, C, bias=False)
        if config.qk_norm:
            self.q_norm = RMSNorm(D, config.rms_norm_eps)
            self.k_norm = RMSNorm(D, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.impl = "eager"  # or "sdpa" (F.scaled_dot_product_attention, torch >= 2.0)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        H, KV, D = self.H, self.KV, self.D
        q = self.q_proj(x).view(B, T, H, D)
        k = self.k_proj(x).view(B, T, KV, D)
        v = self.v_proj(x).view(B, T, KV, D)
        if self.q_norm is not None:  # Qwen3: per-head norm before RoPE
            q = self.q_norm(q)
            k = self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, n, T, D]
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        rep = H // KV
        if rep > 1:  # kv head g serves query heads g*rep .. g*rep+rep-1
            k = k[:, :, None].expand(B, KV, rep, T, D).reshape(B, H, T, D)
            v = v[:, :, None].expand(B, KV, rep, T, D).reshape(B, H, T, D)
        if self.impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (D ** -0.5)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        C, I = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        # Registration order: input_layernorm, self_attn, post_attention_layernorm, mlp.
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """Llama / Qwen3 causal LM with HF's state_dict names (see module doc)."""

    def __init__(self, config: LlamaConfig, attn_impl: str = "eager"):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        # Tied: no lm_head parameter at all; the logits use embed_tokens.weight.
        self.lm_head = None if config.tie_word_embeddings else \
            nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # Not a buffer: .to(bfloat16) must not round the frequencies.
        self.inv_freq = rope_inv_freq(config)
        self.set_attn_impl(attn_impl)
        self.reset_parameters()

    def set_attn_impl(self, impl: str) -> None:
        assert impl in ("eager", "sdpa")
        for layer in self.model.layers:
            layer.self_attn.impl = impl

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Init in registration order (see module doc)."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def output_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def rope(self, T: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width cos, sin [T, D] (fp32) for positions 0..T-1."""
        pos = torch.arange(T, dtype=torch.int64, device=device).float()
        ang = torch.outer(pos, self.inv_freq.to(device))
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None):
        """Return ``(logits [B, T, V], loss or None)``."""
        B, T = idx.shape
        assert T <= self.config.max_position_embeddings, \
            f"sequence length {T} exceeds max_position_embeddings {self.config.max_position_embeddings}"
        cos, sin = self.rope(T, idx.device)
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        logits = F.linear(x, self.output_weight())
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
