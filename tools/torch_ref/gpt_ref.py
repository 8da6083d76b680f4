"""PyTorch reference GPT for parallm (nanoGPT-compatible, written from scratch).

This module is the single source of truth that the C++ implementation is
checked against (via ``gen_golden.py``) and benchmarked against (via
``bench_peer.py``).  It reproduces the architecture, initialisation,
parameter naming and optimizer grouping of Karpathy's nanoGPT ``model.py``
so that numbers, parameter counts and state_dict names line up one to one:

* token embedding ``transformer.wte`` [V, C] and learned position embedding
  ``transformer.wpe`` [block_size, C];
* ``n_layer`` pre-LayerNorm blocks::

      x = x + attn(ln_1(x))
      x = x + mlp(ln_2(x))

  where ``attn`` is causal multi-head self-attention with a fused QKV
  projection ``c_attn`` (Linear(C, 3C)) and output projection ``c_proj``
  (Linear(C, C)), and ``mlp`` is ``c_fc`` (Linear(C, 4C)) -> exact (erf)
  GELU -> ``c_proj`` (Linear(4C, C));
* final LayerNorm ``transformer.ln_f`` and an ``lm_head`` (Linear(C, V),
  no bias) whose weight is the *same tensor* as ``transformer.wte.weight``.

Layout notes that matter for a C++ port:

* ``nn.Linear`` stores its weight as [out_features, in_features] and
  computes ``y = x @ W^T + b``.
* ``c_attn``'s output of width 3C is split as ``[q | k | v]`` (each C wide);
  inside each of q/k/v, head ``h`` owns columns ``h*hd : (h+1)*hd`` with
  ``hd = C // n_head``.  Heads are concatenated back in the same order
  before ``attn.c_proj``.
* LayerNorm uses eps = 1e-5 and the biased (1/N) variance.
* Attention is computed explicitly (torch 1.13 has no
  ``F.scaled_dot_product_attention``): ``softmax(mask(Q K^T / sqrt(hd))) V``
  with masked (future) positions set to -inf before the softmax.

Everything here works in whatever dtype the parameters have; the golden
generator keeps it in float32 throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    """Model hyper-parameters, same field names and defaults as nanoGPT."""

    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # biases in Linear layers and LayerNorms


class LayerNorm(nn.Module):
    """LayerNorm over the last dim with an *optional* bias (eps = 1e-5).

    ``nn.LayerNorm`` in torch 1.13 cannot drop only the bias, hence this
    small wrapper (the same trick nanoGPT uses).
    """

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused QKV projection."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be divisible by n_head"
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        # Lower-triangular causal mask.  Non-persistent so it never shows up
        # in state_dict() (only real parameters are exported).
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        nh = self.n_head
        hd = C // nh
        # [B, T, 3C] -> three [B, T, C] -> [B, nh, T, hd]
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nh, hd).transpose(1, 2)
        v = v.view(B, T, nh, hd).transpose(1, 2)

        # Explicit attention: scores [B, nh, T, T]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # [B, nh, T, hd]

        # Re-assemble heads side by side: [B, T, C]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: Linear(C,4C) -> GELU(erf) -> Linear(4C,C)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()  # exact erf form (approximate='none')
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LN transformer block."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """GPT language model with nanoGPT's module tree and state_dict names."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.vocab_size is not None and config.block_size is not None
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying: wte and lm_head share one Parameter.  named_parameters()
        # de-duplicates, so it is reported once, as transformer.wte.weight.
        self.transformer.wte.weight = self.lm_head.weight

        # GPT-2 style init.  Module order (and therefore RNG consumption) is
        # the same as nanoGPT: every Linear/Embedding gets N(0, 0.02), biases
        # zero; the tied wte/lm_head weight ends up with lm_head's draw
        # (lm_head is visited last).  Then the residual output projections
        # are re-drawn with the scaled std 0.02/sqrt(2*n_layer).
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        # LayerNorm keeps weight=1, bias=0 from its constructor.

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count as nanoGPT reports it.

        The tied wte/lm_head weight is counted once.  With
        ``non_embedding=True`` the position embedding (wpe) is subtracted; the
        token embedding stays in because it is also the output projection.
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    # Alias with nanoGPT's method name.
    get_num_params = num_params

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Return ``(logits [B,T,V], loss)``; loss is None without targets.

        Unlike nanoGPT's inference shortcut, logits are always computed for
        every position so they can be compared element-wise.  The loss is the
        mean cross-entropy over all B*T positions (ignore_index=-1 as in
        nanoGPT; the golden data never uses it).
        """
        B, T = idx.size()
        assert T <= self.config.block_size, \
            f"sequence length {T} exceeds block_size {self.config.block_size}"
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)  # [B, T, C]
        pos_emb = self.transformer.wpe(pos)  # [T, C], broadcast over B
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)  # [B, T, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay: float, learning_rate: float,
                             betas: tuple[float, float], eps: float = 1e-8,
                             verbose: bool = False) -> torch.optim.AdamW:
        """AdamW with nanoGPT's grouping: decay iff ``p.dim() >= 2``.

        So all matmul weights and both embeddings (wte == lm_head, wpe) are
        decayed; biases and LayerNorm gains are not.  Uses the plain
        single-tensor implementation (``foreach=False``) so the update order
        is the textbook one:

            p      *= 1 - lr*wd
            m       = b1*m + (1-b1)*g
            v       = b2*v + (1-b2)*g*g
            p      -= (lr / (1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
        """
        return configure_optimizers(self, weight_decay, learning_rate, betas, eps, verbose)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Split trainable parameters into decay (dim>=2) / no-decay groups."""
    params = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def configure_optimizers(model: nn.Module, weight_decay: float, learning_rate: float,
                         betas: tuple[float, float], eps: float = 1e-8,
                         verbose: bool = False) -> torch.optim.AdamW:
    """Free-function form of :meth:`GPT.configure_optimizers`."""
    groups = param_groups(model, weight_decay)
    if verbose:
        nd = sum(p.numel() for p in groups[0]["params"])
        nn_ = sum(p.numel() for p in groups[1]["params"])
        print(f"num decayed parameter tensors: {len(groups[0]['params'])}, with {nd:,} parameters")
        print(f"num non-decayed parameter tensors: {len(groups[1]['params'])}, with {nn_:,} parameters")
    # Drop empty groups (torch is fine with them, but keep it tidy).
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps, foreach=False)


def exported_named_parameters(model: GPT):
    """(name, Parameter) pairs to export: everything except the tied lm_head.

    ``named_parameters()`` already reports the shared tensor only once, as
    ``transformer.wte.weight``; the explicit filter just makes that intent
    obvious and robust.
    """
    for name, p in model.named_parameters():
        if name == "lm_head.weight":
            continue
        yield name, p
