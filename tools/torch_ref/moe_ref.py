"""PyTorch reference of a mixture-of-experts Llama / Qwen3 causal LM (from scratch).

Extends ``llama_ref.LlamaForCausalLM`` (attention, RMSNorm, RoPE, QK-norm,
embeddings and head are reused unchanged): on selected layers the dense
SwiGLU MLP is replaced by a routed mixture of SwiGLU experts, optionally
with always-on shared experts and a DeepSeek-V3-style selection bias.
Covers Mixtral, Qwen3-MoE (softmax, top-k, optional renormalisation) and the
sigmoid / bias / routed-scale / shared-expert variant of DeepSeek-V3 (as
Megatron-style training with a load-balancing and a z-loss).  Used by
``gen_golden_moe.py`` (golden files for the C++ tests) and ``moe_hf_dir.py``
(Hugging Face Qwen3-MoE / Mixtral directories and their logits).

Layer l is MoE iff ``l >= first and (l - first) % every == 0`` (or, when
``MoeConfig.layers`` is set, iff l is in it); the other layers keep
llama_ref's dense MLP (``intermediate_size`` wide).

MoE MLP of one layer, x = the post-attention RMSNorm output flattened to
rows t = 1..N (N = batch * seq of the micro-batch), hidden C, E experts,
top-k, expert width Fe::

    z      = x @ Wr^T                        # router logits [N, E], fp32 (no bias)
    score  = softmax(z)  | sigmoid(z)        # score = "softmax" | "sigmoid"
    chosen = top-k of (score + b)            # b = e_score_correction_bias, or 0
             ordered by descending (score + b), ties -> lower expert index
    w      = score[chosen]                   # the unbiased scores
    w      = w / w.sum()  if norm_topk       # (no epsilon)
    w      = w * routed_scale
    out    = sum_j w_j * expert_{chosen_j}(x) + shared(x)
    expert_e(x) = down_e(silu(gate_e(x)) * up_e(x))     # SwiGLU, width Fe
    shared(x)   = same SwiGLU of width shared * Fe      # only when shared > 0

Per-layer auxiliary losses, added to the LM loss (gradients are of the sum)::

    aux_l = aux_coef * E / (k * N^2) * sum_e count_e * sum_t P[t, e]
    z_l   = z_coef * mean_t (logsumexp_e z[t, e])^2

``count_e`` = number of (token, choice) pairs that chose e (a constant, no
gradient); ``P`` = softmax(z) for softmax scores, ``score / score.sum(-1)``
for sigmoid scores (Megatron's "switch" load-balancing form).

Parameter names of an MoE layer (prefix ``model.layers.{l}.``), in
registration order, replacing ``mlp.gate_proj / up_proj / down_proj``::

    mlp.gate.weight                        [E, C]      router
    mlp.gate.e_score_correction_bias       [E]         only with bias=True; fixed (requires_grad False)
    mlp.experts.gate_proj.weight           [E*Fe, C]   expert e = rows e*Fe .. (e+1)*Fe
    mlp.experts.up_proj.weight             [E*Fe, C]
    mlp.experts.down_proj.weight           [E*C, Fe]   expert e = rows e*C .. (e+1)*C
    mlp.shared_experts.gate_proj.weight    [S, C]      S = shared * Fe, only with shared > 0
    mlp.shared_experts.up_proj.weight      [S, C]
    mlp.shared_experts.down_proj.weight    [C, S]

(the stacked [E, Fe, C] / [E, C, Fe] expert tensors flattened to 2-D).

Initialisation: as llama_ref (registration order; Linear weights, router
and experts included, N(0, 0.02); RMSNorm weights 1 + 0.1 N(0, 1)), and
the correction bias N(0, 0.1).  The model is first built dense (llama_ref's
constructor initialises it), the MoE MLPs are then swapped in and every
parameter is initialised again in registration order; deterministic given
``torch.manual_seed``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import MLP, LlamaConfig, LlamaForCausalLM  # noqa: E402


@dataclass
class MoeConfig:
    """The MoE hyper-parameters (names as in the golden manifests' ``moe`` object)."""

    experts: int = 8
    top_k: int = 2
    intermediate: int = 16  # Fe, one expert's SwiGLU width
    shared: int = 0  # shared-expert width in units of Fe (0: none)
    score: str = "softmax"  # or "sigmoid"
    norm_topk: bool = True
    routed_scale: float = 1.0
    aux_coef: float = 0.0
    z_coef: float = 0.0
    first: int = 0
    every: int = 1
    bias: bool = False  # e_score_correction_bias used for the selection only
    # Explicit MoE layer indices, overriding first / every (HF configs'
    # mlp_only_layers can name any set); None: use first / every.
    layers: Optional[tuple] = None

    def __post_init__(self) -> None:
        assert self.score in ("softmax", "sigmoid"), self.score
        assert 1 <= self.top_k <= self.experts
        assert self.first >= 0 and self.every >= 1 and self.shared >= 0

    def is_moe(self, layer: int) -> bool:
        if self.layers is not None:
            return layer in self.layers
        return layer >= self.first and (layer - self.first) % self.every == 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Router(nn.Module):
    def __init__(self, C: int, moe: MoeConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(moe.experts, C))
        if moe.bias:
            # A fixed buffer in DeepSeek-V3's sense; kept as a parameter that
            # does not train so that it is listed (and saved) in order.
            self.e_score_correction_bias = nn.Parameter(torch.zeros(moe.experts), requires_grad=False)
        else:
            self.e_score_correction_bias = None


class StackedExperts(nn.Module):
    """E SwiGLU experts as three stacked Linear weights (see module doc)."""

    def __init__(self, C: int, moe: MoeConfig):
        super().__init__()
        E, Fe = moe.experts, moe.intermediate
        self.E, self.C, self.Fe = E, C, Fe
        self.gate_proj = nn.Linear(C, E * Fe, bias=False)
        self.up_proj = nn.Linear(C, E * Fe, bias=False)
        self.down_proj = nn.Linear(Fe, E * C, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every expert on every row: x [N, C] -> [N, E, C] (tiny models only)."""
        N = x.shape[0]
        E, C, Fe = self.E, self.C, self.Fe
        a = F.silu(self.gate_proj(x)) * self.up_proj(x)  # [N, E*Fe]
        a = a.view(N, E, Fe)
        return torch.einsum("nef,ecf->nec", a, self.down_proj.weight.view(E, C, Fe))


class MoeMLP(nn.Module):
    def __init__(self, config: LlamaConfig, moe: MoeConfig):
        super().__init__()
        self.moe = moe
        C = config.hidden_size
        # Registration order: gate (router [+ bias]), experts, shared_experts.
        self.gate = Router(C, moe)
        self.experts = StackedExperts(C, moe)
        if moe.shared > 0:
            self.shared_experts = MLP(dataclasses.replace(config, intermediate_size=moe.shared * moe.intermediate))
        else:
            self.shared_experts = None
        self.last: dict = {}  # what the latest forward routed (see forward)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        moe = self.moe
        E, k = moe.experts, moe.top_k
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        N = xf.shape[0]
        rdt = torch.promote_types(x.dtype, torch.float32)  # router in fp32 (or wider)
        z = F.linear(xf.to(rdt), self.gate.weight.to(rdt))  # [N, E]
        score = F.softmax(z, dim=-1) if moe.score == "softmax" else torch.sigmoid(z)
        sel = score.detach()
        if self.gate.e_score_correction_bias is not None:
            sel = sel + self.gate.e_score_correction_bias.detach().to(rdt)
        # Descending, ties by lower index (stable sort keeps index order).
        order = torch.sort(sel, dim=-1, descending=True, stable=True).indices
        chosen = order[:, :k]  # [N, k]
        ranked = sel.gather(1, order)
        margin = (ranked[:, k - 1] - ranked[:, k]).min().item() if k < E else float("inf")
        inner = (ranked[:, :k - 1] - ranked[:, 1:k]).min().item() if k > 1 else float("inf")
        w = score.gather(1, chosen)
        if moe.norm_topk:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w * moe.routed_scale
        y = self.experts(xf)  # [N, E, C]
        ysel = y.gather(1, chosen[..., None].expand(N, k, y.shape[-1]))  # [N, k, C]
        out = (w.to(x.dtype)[..., None] * ysel).sum(dim=1)
        if self.shared_experts is not None:
            out = out + self.shared_experts(xf)
        counts = torch.bincount(chosen.reshape(-1), minlength=E)  # [E] int64, no gradient
        zero = z.new_zeros(())
        if moe.aux_coef != 0.0:
            P = score if moe.score == "softmax" else score / score.sum(dim=-1, keepdim=True)
            aux = moe.aux_coef * E / (k * N * N) * (counts.to(rdt) * P.sum(dim=0)).sum()
        else:
            aux = zero
        if moe.z_coef != 0.0:
            zl = moe.z_coef * torch.logsumexp(z, dim=-1).pow(2).mean()
        else:
            zl = zero
        self.last = dict(logits=z.detach(), selection=sel, chosen=chosen, weights=w.detach(), counts=counts,
                         aux=aux, zloss=zl, margin=margin, inner_margin=inner)
        return out.view(shape)


class MoeForCausalLM(LlamaForCausalLM):
    """llama_ref's causal LM with :class:`MoeMLP` on the layers ``moe.is_moe`` selects.

    ``forward(idx, targets)`` returns ``(logits, lm_loss, aux_loss)``:
    ``lm_loss`` the mean cross-entropy (None without targets), ``aux_loss``
    the sum over MoE layers of ``aux_l + z_l`` (a 0-d tensor).  Train on
    ``lm_loss + aux_loss``.  After a forward, :meth:`moe_layers` gives each
    MoE layer's routing (``mlp.last``).
    """

    def __init__(self, config: LlamaConfig, moe: MoeConfig, attn_impl: str = "eager"):
        self.moe = moe
        super().__init__(config, attn_impl)  # dense everywhere, initialised once
        for l, layer in enumerate(self.model.layers):
            if moe.is_moe(l):
                layer.mlp = MoeMLP(config, moe)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Init in registration order (see the module doc)."""
        for name, p in self.named_parameters():
            if name.endswith("e_score_correction_bias"):
                p.normal_(0.0, 0.1)
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02)

    def moe_layers(self) -> Iterator[tuple[int, MoeMLP]]:
        for l, layer in enumerate(self.model.layers):
            if isinstance(layer.mlp, MoeMLP):
                yield l, layer.mlp

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None):
        logits, loss = super().forward(idx, targets)
        aux = logits.new_zeros((), dtype=torch.promote_types(logits.dtype, torch.float32))
        for _, mlp in self.moe_layers():
            aux = aux + mlp.last["aux"] + mlp.last["zloss"]
        return logits, loss, aux

    def min_margin(self) -> float:
        """Smallest (k-th minus (k+1)-th) of score + b over the latest forward's tokens and layers."""
        return min((mlp.last["margin"] for _, mlp in self.moe_layers()), default=float("inf"))
