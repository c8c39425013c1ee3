"""Decoder-only Transformer configs, presets of public checkpoints and exact parameter counts.

Book: "How to Scale Your Model", section 4 (All the Transformer Math You Need to Know):
4.1 (FLOPs of a contraction, forward vs backward), 4.3 (per-layer params and FLOPs of the MLP,
the Q/K/V/O projections and the two attention dot products), 4.4.1 (mixture of experts).
FLOPs live in ``scalelib.transformer_flops``; memory (KV cache, activations, optimizer state)
in ``scalelib.transformer_memory``.

Letters follow the book: D = d_model, F = d_ff, N = query heads, K = key/value heads,
H = head_dim, G = N / K (query heads per KV head), V = vocab, L = layers, T / S = query / key
lengths. Counts are exact Python ints.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from scalelib.validate import positive_int

Activation = Literal["silu", "gelu"]
# Rematerialization policies (section 4.4.2); scalelib.transformer_memory says what each keeps.
RematPolicy = Literal["none", "dots", "dots_no_batch", "block_inputs", "full"]
REMAT_POLICIES: tuple[str, ...] = ("none", "dots", "dots_no_batch", "block_inputs", "full")


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a decoder-only Transformer (pre-norm, rotary positions, no learned positions).

    ``head_dim`` is independent of ``d_model``: N * H need not equal D (Gemma-7B has 16 x 256 =
    4096 against D = 3072). ``n_experts = 0`` means a dense MLP of width ``d_ff``; with experts,
    each MoE layer has ``n_experts`` routed experts of width ``expert_d_ff`` (top
    ``experts_per_token`` chosen by a linear router) plus ``n_shared_experts`` always-on experts
    of the same width.
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    gated_mlp: bool = True  # SwiGLU-style: gate and up matrices (3DF) vs up/down only (2DF)
    tied_embeddings: bool = False  # unembedding reuses the embedding matrix
    qkv_bias: bool = False  # bias vectors on the q, k, v projections (Qwen2)
    o_bias: bool = False  # bias on the output projection
    norms_per_layer: int = 2  # pre-attention and pre-MLP
    norm_bias: bool = False  # LayerNorm (scale + bias) instead of RMSNorm (scale only)
    final_norm: bool = True
    n_experts: int = 0
    experts_per_token: int = 0
    n_shared_experts: int = 0
    expert_d_ff: int | None = None  # width of one expert; defaults to d_ff
    router_bias: bool = False
    activation: Activation = "silu"
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    name: str = "custom"

    def __post_init__(self) -> None:
        for f in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff"):
            object.__setattr__(self, f, positive_int(f, getattr(self, f)))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; each KV head "
                "serves a whole group of query heads, so pick n_kv_heads among the divisors of n_heads")
        if self.norms_per_layer < 0:
            raise ValueError(f"norms_per_layer must be >= 0, got {self.norms_per_layer}")
        if self.activation not in ("silu", "gelu"):
            raise ValueError(f"activation must be 'silu' or 'gelu', got {self.activation!r}")
        if self.n_experts < 0 or self.n_shared_experts < 0:
            raise ValueError(f"expert counts must be >= 0, got n_experts={self.n_experts}, "
                             f"n_shared_experts={self.n_shared_experts}")
        if self.n_experts == 0 and (self.experts_per_token or self.n_shared_experts):
            raise ValueError("experts_per_token / n_shared_experts need n_experts > 0; set n_experts "
                             "for an MoE model or leave them at 0 for a dense one")
        if self.n_experts and not 1 <= self.experts_per_token <= self.n_experts:
            raise ValueError(f"experts_per_token must be in [1, n_experts={self.n_experts}], "
                             f"got {self.experts_per_token}")

    # ---- derived sizes ----
    @property
    def q_dim(self) -> int:
        """N * H: width of all query heads together."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """K * H: width of all key (or value) heads together."""
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """G = N / K query heads per KV head (1 for MHA, N for MQA)."""
        return self.n_heads // self.n_kv_heads

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def ff_width(self) -> int:
        """Width of one expert (MoE) or of the dense MLP."""
        return (self.expert_d_ff or self.d_ff) if self.is_moe else self.d_ff

    def replace(self, **changes: Any) -> TransformerConfig:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return TransformerConfig(**values)


# ---------------------------------------------------------------- presets
# Published checkpoints (HF config.json). Their exact parameter totals are asserted in the tests.

def _llama3(name: str, d: int, layers: int, heads: int, ff: int) -> TransformerConfig:
    return TransformerConfig(vocab_size=128_256, d_model=d, n_layers=layers, n_heads=heads, n_kv_heads=8,
                             head_dim=128, d_ff=ff, rope_theta=500_000.0, name=name)


PRESETS: dict[str, TransformerConfig] = {
    c.name: c for c in (
        _llama3("llama3-8b", 4096, 32, 32, 14_336),
        _llama3("llama3-70b", 8192, 80, 64, 28_672),
        _llama3("llama3-405b", 16_384, 126, 128, 53_248),
        TransformerConfig(name="llama2-13b", vocab_size=32_000, d_model=5120, n_layers=40, n_heads=40,
                          n_kv_heads=40, head_dim=128, d_ff=13_824),
        TransformerConfig(name="mixtral-8x7b", vocab_size=32_000, d_model=4096, n_layers=32, n_heads=32,
                          n_kv_heads=8, head_dim=128, d_ff=14_336, n_experts=8, experts_per_token=2,
                          rope_theta=1e6),
        TransformerConfig(name="qwen2.5-7b", vocab_size=152_064, d_model=3584, n_layers=28, n_heads=28,
                          n_kv_heads=4, head_dim=128, d_ff=18_944, qkv_bias=True, rope_theta=1e6, norm_eps=1e-6),
        TransformerConfig(name="gemma-2b", vocab_size=256_000, d_model=2048, n_layers=18, n_heads=8,
                          n_kv_heads=1, head_dim=256, d_ff=16_384, tied_embeddings=True, activation="gelu",
                          norm_eps=1e-6),
        TransformerConfig(name="gemma-7b", vocab_size=256_000, d_model=3072, n_layers=28, n_heads=16,
                          n_kv_heads=16, head_dim=256, d_ff=24_576, tied_embeddings=True, activation="gelu",
                          norm_eps=1e-6),
        # Section 7's invented model (LLaMA-2-13B-like, shared embeddings) and its MoE variant (Ex 7.5).
        TransformerConfig(name="book-ch7-18b", vocab_size=32_128, d_model=4096, n_layers=64, n_heads=32,
                          n_kv_heads=8, head_dim=256, d_ff=16_384, tied_embeddings=True),
        TransformerConfig(name="book-ch7-moe", vocab_size=32_128, d_model=4096, n_layers=64, n_heads=32,
                          n_kv_heads=8, head_dim=256, d_ff=16_384, tied_embeddings=True, n_experts=16,
                          experts_per_token=2),
    )
}


def preset(name: str) -> TransformerConfig:
    """A named config ('llama3-70b', 'mixtral-8x7b', ...)."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def dense_mha_config(d_model: int, n_layers: int, vocab_size: int, *, d_ff: int | None = None,
                     head_dim: int = 128, norms_per_layer: int = 2, final_norm: bool = True,
                     name: str = "mha") -> TransformerConfig:
    """The book's default shape: N * H = D, N = K (MHA), gated MLP with F = 4D unless given."""
    if d_model % head_dim:
        raise ValueError(f"d_model={d_model} is not a multiple of head_dim={head_dim}; N * H = D needs it")
    n = d_model // head_dim
    return TransformerConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n, n_kv_heads=n,
                             head_dim=head_dim, d_ff=4 * d_model if d_ff is None else d_ff,
                             norms_per_layer=norms_per_layer, final_norm=final_norm, name=name)


# ---------------------------------------------------------------- parameters (section 4.3)

@dataclass(frozen=True)
class ParamCounts:
    """Exact parameter counts by component, summed over all layers."""

    embedding: int
    unembedding: int  # 0 when tied
    attention: int  # Q, K, V, O weights and biases
    mlp: int  # dense MLP, or every routed + shared expert
    mlp_active: int  # MLP parameters one token uses (k routed + shared experts)
    router: int
    norms: int

    @property
    def total(self) -> int:
        return self.embedding + self.unembedding + self.attention + self.mlp + self.router + self.norms

    @property
    def active(self) -> int:
        """Parameters touched by one token (equals ``total`` for dense models)."""
        return self.total - self.mlp + self.mlp_active

    @property
    def vocab(self) -> int:
        return self.embedding + self.unembedding

    @property
    def attention_fraction(self) -> float:
        """Attention share of the per-layer weight matrices (attention / (attention + MLP))."""
        return self.attention / (self.attention + self.mlp)


def mlp_params_per_expert(cfg: TransformerConfig) -> int:
    """3 D F for a gated MLP, 2 D F for an up/down one (F is one expert's width for MoE)."""
    return (3 if cfg.gated_mlp else 2) * cfg.d_model * cfg.ff_width


def param_counts(cfg: TransformerConfig) -> ParamCounts:
    """Exact parameter count of ``cfg``, which is also the size of ``scalelib.model.init``'s pytree."""
    d, L = cfg.d_model, cfg.n_layers
    attn = 2 * d * cfg.q_dim + 2 * d * cfg.kv_dim
    attn += (cfg.q_dim + 2 * cfg.kv_dim) * cfg.qkv_bias + d * cfg.o_bias
    one = mlp_params_per_expert(cfg)
    if cfg.is_moe:
        mlp = (cfg.n_experts + cfg.n_shared_experts) * one
        mlp_active = (cfg.experts_per_token + cfg.n_shared_experts) * one
        router = d * cfg.n_experts + cfg.n_experts * cfg.router_bias
    else:
        mlp = mlp_active = one
        router = 0
    per_norm = d * (2 if cfg.norm_bias else 1)
    norms = (L * cfg.norms_per_layer + cfg.final_norm) * per_norm
    emb = cfg.vocab_size * d
    return ParamCounts(embedding=emb, unembedding=0 if cfg.tied_embeddings else emb, attention=L * attn,
                       mlp=L * mlp, mlp_active=L * mlp_active, router=L * router, norms=norms)
