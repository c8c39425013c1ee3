"""A small decoder-only Transformer in pure JAX, built from a ``TransformerConfig``.

Book: "How to Scale Your Model", section 4.2 (the Transformer layer and its letters B, T, D, N,
K, G, H, F) and 4.4.1 (mixture of experts). Pre-norm layers: RMSNorm (LayerNorm when the config
asks for norm biases), rotary positions, causal grouped-query attention, a gated (SwiGLU /
GeGLU) or plain MLP, or an MoE layer with a top-k router. Later chapters train, shard and serve
this model, so the parameters are a plain dict of arrays with stable names; per-layer arrays are
stacked along a leading ``L`` axis (``params["layers"]["wq"][i]`` is layer i's W_Q).

MoE uses dense dispatch: every expert runs on every token and the router's weights (zero for
unchosen experts) combine the outputs. Simple and exact, but it spends E / k times the routed
FLOPs (``scalelib.transformer.forward_flops(..., moe_compute='dense')`` counts that).

One forward serves every parallel scheme: ``LayerHooks`` say where a scheme changes a layer (a
collective around each block, another attention, positions past a sequence shard's start, a
routed MoE), ``run_layers`` takes the weights of layer i from a function (so a scheme can gather
or slice them) and ``token_nll`` is the one head (final norm, unembedding, log-softmax, loss).
``scalelib.param_axes`` names the logical axes of every parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp

from scalelib.kernels.flash_attention import reference_attention
from scalelib.transformer import REMAT_POLICIES, TransformerConfig

Params = dict
AttentionFn = Callable[..., jax.Array]  # (q [B,T,N,H], k [B,S,K,H], v [B,S,K,H], causal) -> [B,T,N,H]


def small_config(**changes: Any) -> TransformerConfig:
    """A tiny GQA model that runs in well under a second on a CPU (about 0.1M parameters)."""
    base = TransformerConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                             d_ff=128, name="small")
    return base.replace(**changes)


def _check_model_config(cfg: TransformerConfig) -> None:
    if cfg.norms_per_layer != 2:
        raise ValueError(f"scalelib.model builds pre-norm layers with exactly 2 norms, got norms_per_layer="
                         f"{cfg.norms_per_layer}; the accounting in scalelib.transformer handles other counts")
    if cfg.head_dim % 2:
        raise ValueError(f"rotary embeddings rotate pairs of features, so head_dim must be even, got {cfg.head_dim}")


def init(key: jax.Array, cfg: TransformerConfig, dtype: Any = jnp.float32) -> Params:
    """Random parameters: weights ~ N(0, 1/fan_in), norm scales 1, biases 0.

    One compiled program per (config, dtype), drawing every weight from one normal draw over ``key`` cut into
    pieces (in the tree's order): called eagerly, each draw and constant would be a small program of its own
    to compile (some twenty per model), and a draw per weight triples the program."""
    _check_model_config(cfg)
    return _init_compiled(key, cfg, dtype)


@dataclass(frozen=True)
class _Draw:
    """A weight of ``_init``'s tree before the single random draw fills it: its shape and fan-in."""

    shape: tuple[int, ...]
    fan_in: int


def _init(key: jax.Array, cfg: TransformerConfig, dtype: Any) -> Params:
    d, L, n, kh, h, f = cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ff_width

    w = _Draw  # w(shape, fan_in): a weight, drawn below with the others

    ones, zeros = (lambda *s: jnp.ones(s, dtype)), (lambda *s: jnp.zeros(s, dtype))
    layers = {
        "attn_norm": ones(L, d),  # [L, D]
        "wq": w((L, d, n, h), d),  # [L, D, N, H]
        "wk": w((L, d, kh, h), d),  # [L, D, K, H]
        "wv": w((L, d, kh, h), d),  # [L, D, K, H]
        "wo": w((L, n, h, d), n * h),  # [L, N, H, D]
        "mlp_norm": ones(L, d),  # [L, D]
    }
    if cfg.norm_bias:
        layers["attn_norm_bias"] = zeros(L, d)  # [L, D]
        layers["mlp_norm_bias"] = zeros(L, d)  # [L, D]
    if cfg.qkv_bias:
        layers["bq"] = zeros(L, n, h)  # [L, N, H]
        layers["bk"] = zeros(L, kh, h)  # [L, K, H]
        layers["bv"] = zeros(L, kh, h)  # [L, K, H]
    if cfg.o_bias:
        layers["bo"] = zeros(L, d)  # [L, D]
    if cfg.is_moe:
        e, s = cfg.n_experts, cfg.n_shared_experts
        layers["router"] = w((L, d, e), d)  # [L, D, E]
        if cfg.router_bias:
            layers["router_bias"] = zeros(L, e)  # [L, E]
        if cfg.gated_mlp:
            layers["w_gate"] = w((L, e, d, f), d)  # [L, E, D, F]
        layers["w_up"] = w((L, e, d, f), d)  # [L, E, D, F]
        layers["w_down"] = w((L, e, f, d), f)  # [L, E, F, D]
        if s:  # shared experts always run: stored as one MLP of width s * F
            if cfg.gated_mlp:
                layers["shared_w_gate"] = w((L, d, s * f), d)  # [L, D, sF]
            layers["shared_w_up"] = w((L, d, s * f), d)  # [L, D, sF]
            layers["shared_w_down"] = w((L, s * f, d), s * f)  # [L, sF, D]
    else:
        if cfg.gated_mlp:
            layers["w_gate"] = w((L, d, f), d)  # [L, D, F]
        layers["w_up"] = w((L, d, f), d)  # [L, D, F]
        layers["w_down"] = w((L, f, d), f)  # [L, F, D]
    params = {"embed": w((cfg.vocab_size, d), 1), "layers": layers}  # embed [V, D]
    if cfg.final_norm:
        params["final_norm"] = ones(d)  # [D]
        if cfg.norm_bias:
            params["final_norm_bias"] = zeros(d)  # [D]
    if not cfg.tied_embeddings:
        params["unembed"] = w((d, cfg.vocab_size), d)  # [D, V]
    # Every weight comes from one normal draw, cut into pieces: a draw per weight compiles each its own threefry and
    # inverse erf, three times the program (about 1.1 s of CPU instead of 0.35 s for a small model at LLVM level 0),
    # and init compiles once per config in every process, kernel and test that builds a model.
    leaves, tree = jax.tree.flatten(params, is_leaf=lambda x: isinstance(x, _Draw))
    draws = [x for x in leaves if isinstance(x, _Draw)]
    flat = jax.random.normal(key, (sum(math.prod(x.shape) for x in draws),), jnp.float32)  # [all weights' scalars]
    out, start = [], 0
    for x in leaves:  # in the tree's order
        if isinstance(x, _Draw):
            size = math.prod(x.shape)
            x = (flat[start:start + size].reshape(x.shape) * x.fan_in ** -0.5).astype(dtype)
            start += size
        out.append(x)
    return jax.tree.unflatten(tree, out)


_init_compiled = jax.jit(_init, static_argnums=(1, 2))


def param_shapes(cfg: TransformerConfig, dtype: Any = jnp.float32) -> Params:
    """The parameter pytree of ``init`` as shapes and dtypes only (``jax.ShapeDtypeStruct``); nothing is computed."""
    return jax.eval_shape(lambda k: init(k, cfg, dtype), jax.random.key(0))


def param_count(params: Params) -> int:
    """Number of scalars in a parameter pytree."""
    return sum(int(x.size) for x in jax.tree.leaves(params))


def norm(x: jax.Array, scale: jax.Array, bias: jax.Array | None, eps: float) -> jax.Array:
    """RMSNorm over the last axis (LayerNorm, i.e. mean-centred, when a bias is given)."""
    x32 = x.astype(jnp.float32)  # [..., D]
    if bias is not None:
        x32 = x32 - x32.mean(-1, keepdims=True)  # [..., D]
    y = x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + eps)  # [..., D]
    y = y * scale  # [..., D]
    return (y if bias is None else y + bias).astype(x.dtype)


def rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotary position embedding of x [B, T, heads, H] at integer ``positions`` [T] (half-split pairs)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)  # [H/2]
    angles = positions[:, None].astype(jnp.float32) * freqs  # [T, H/2]
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]  # [T, 1, H/2]
    x1, x2 = x[..., :half], x[..., half:]  # [B, T, heads, H/2] each
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)  # [B, T, heads, H]


def activation(cfg: TransformerConfig, x: jax.Array) -> jax.Array:
    """The MLP's nonlinearity: SiLU or GELU, as the config says."""
    return jax.nn.silu(x) if cfg.activation == "silu" else jax.nn.gelu(x)


def dense_mlp(cfg: TransformerConfig, x: jax.Array, w_gate: jax.Array | None, w_up: jax.Array,
              w_down: jax.Array) -> jax.Array:
    """x [..., D] -> [..., D] (gated when ``w_gate`` is given); one expert's MLP, or a shard of one."""
    up = x @ w_up  # [..., F]
    hidden = activation(cfg, x @ w_gate) * up if w_gate is not None else activation(cfg, up)  # [..., F]
    return hidden @ w_down  # [..., D]


def moe(cfg: TransformerConfig, p: dict, x: jax.Array) -> jax.Array:
    """Top-k routed experts with dense dispatch: x [B, T, D] -> [B, T, D]."""
    logits = jnp.einsum("btd,de->bte", x, p["router"])  # [B, T, E]
    if "router_bias" in p:
        logits = logits + p["router_bias"]  # [B, T, E]
    top_logits, top_idx = jax.lax.top_k(logits, cfg.experts_per_token)  # [B, T, k] each
    top_w = jax.nn.softmax(top_logits.astype(jnp.float32), axis=-1).astype(x.dtype)  # [B, T, k]
    combine = (jax.nn.one_hot(top_idx, cfg.n_experts, dtype=x.dtype) * top_w[..., None]).sum(-2)  # [B, T, E]
    up = jnp.einsum("btd,edf->btef", x, p["w_up"])  # [B, T, E, F]
    if "w_gate" in p:
        hidden = activation(cfg, jnp.einsum("btd,edf->btef", x, p["w_gate"])) * up  # [B, T, E, F]
    else:
        hidden = activation(cfg, up)  # [B, T, E, F]
    out = jnp.einsum("btef,efd->bted", hidden, p["w_down"])  # [B, T, E, D]
    out = (out * combine[..., None]).sum(-2)  # [B, T, D]
    if "shared_w_up" in p:
        out = out + dense_mlp(cfg, x, p.get("shared_w_gate"), p["shared_w_up"], p["shared_w_down"])  # [B, T, D]
    return out


def _same(x: jax.Array) -> jax.Array:
    return x


@dataclass(frozen=True)
class LayerHooks:
    """Where a parallel scheme changes a layer; the defaults give the single-device layer.

    ``enter`` is applied to each block's normalized input and ``exit`` to the block's output before
    its bias and the residual add (tensor parallelism puts its collectives there: Megatron's f and
    g). ``attention_fn(q, k, v, causal=True)`` computes attention; ``positions(t)`` are the global
    positions [t] of the t tokens here (a sequence shard starts past 0); ``mlp(p, y)``, when given,
    replaces the MLP or MoE on the normalized input y (expert parallelism routes tokens there).
    """

    attention_fn: AttentionFn = reference_attention
    positions: Callable[[int], jax.Array] = jnp.arange
    enter: Callable[[jax.Array], jax.Array] = _same
    exit: Callable[[jax.Array], jax.Array] = _same
    mlp: Callable[[dict, jax.Array], jax.Array] | None = None


SINGLE_DEVICE = LayerHooks()


def attention_block(cfg: TransformerConfig, p: dict, x: jax.Array, attention_fn: AttentionFn | None = None,
                    hooks: LayerHooks = SINGLE_DEVICE) -> jax.Array:
    """Residual branch of the attention block: x [B, T, D] -> [B, T, D] (norm, QKV, RoPE, attention, O).

    ``attention_fn`` (default: the hooks') computes attention from the rotated q, k and v.
    """
    y = hooks.enter(norm(x, p["attn_norm"], p.get("attn_norm_bias"), cfg.norm_eps))  # [B, T, D]
    q = jnp.einsum("btd,dnh->btnh", y, p["wq"])  # [B, T, N, H]
    k = jnp.einsum("btd,dkh->btkh", y, p["wk"])  # [B, T, K, H]
    v = jnp.einsum("btd,dkh->btkh", y, p["wv"])  # [B, T, K, H]
    if cfg.qkv_bias:
        q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]  # biases broadcast over [B, T]
    positions = hooks.positions(x.shape[1])  # [T]
    q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)  # [B, T, N|K, H]
    att = (attention_fn or hooks.attention_fn)(q, k, v, causal=True)  # [B, T, N, H]
    out = hooks.exit(jnp.einsum("btnh,nhd->btd", att, p["wo"]))  # [B, T, D]
    return out + p["bo"] if cfg.o_bias else out


def mlp_block(cfg: TransformerConfig, p: dict, x: jax.Array, hooks: LayerHooks = SINGLE_DEVICE) -> jax.Array:
    """Residual branch of the MLP (or MoE) block: x [B, T, D] -> [B, T, D]."""
    y = hooks.enter(norm(x, p["mlp_norm"], p.get("mlp_norm_bias"), cfg.norm_eps))  # [B, T, D]
    if hooks.mlp is not None:
        return hooks.exit(hooks.mlp(p, y))
    if cfg.is_moe:
        return hooks.exit(moe(cfg, p, y))
    return hooks.exit(dense_mlp(cfg, y, p.get("w_gate"), p["w_up"], p["w_down"]))  # [B, T, D]


def layer(cfg: TransformerConfig, p: dict, x: jax.Array, hooks: LayerHooks = SINGLE_DEVICE) -> jax.Array:
    """One pre-norm layer: x [B, T, D] -> [B, T, D], both residual blocks."""
    x = x + attention_block(cfg, p, x, hooks=hooks)  # [B, T, D]
    return x + mlp_block(cfg, p, x, hooks)  # [B, T, D]


def layer_params(params: Params, i: int) -> dict:
    """Layer i's weights, sliced out of the stacked [L, ...] arrays."""
    return jax.tree.map(lambda a: a[i], params["layers"])


def run_layers(cfg: TransformerConfig, x: jax.Array, layer_at: Callable[[int], dict], layers: range | None = None,
               hooks: LayerHooks = SINGLE_DEVICE) -> jax.Array:
    """x [B, T, D] through ``layers`` (default: all), unrolled; ``layer_at(i)`` supplies layer i's weights."""
    for i in range(cfg.n_layers) if layers is None else layers:
        x = layer(cfg, layer_at(i), x, hooks)  # [B, T, D]
    return x


def logits(cfg: TransformerConfig, top: dict, x: jax.Array) -> jax.Array:
    """The head without the loss: final norm and unembedding, x [B, T, D] -> logits [B, T, V] (float32).

    ``top`` holds the non-layer weights (embed, final_norm, unembed).
    """
    if cfg.final_norm:
        x = norm(x, top["final_norm"], top.get("final_norm_bias"), cfg.norm_eps)  # [B, T, D]
    w_out = top["embed"].T if cfg.tied_embeddings else top["unembed"]  # [D, V]
    return (x @ w_out).astype(jnp.float32)  # [B, T, V]


def token_nll(cfg: TransformerConfig, top: dict, x: jax.Array, targets: jax.Array) -> jax.Array:
    """The head: final norm, unembedding, log-softmax; the loss of each position, [B, T], for targets [B, T]."""
    logp = jax.nn.log_softmax(logits(cfg, top, x), axis=-1)  # [B, T, V]
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # [B, T]


def stack_loss(cfg: TransformerConfig, top: dict, layer_at: Callable[[int], dict], tokens: jax.Array,
               hooks: LayerHooks = SINGLE_DEVICE) -> jax.Array:
    """``loss`` with the weights given as ``top`` and ``layer_at(i)``, so a scheme can gather or shard them."""
    x = top["embed"][tokens[:, :-1]]  # [B, T, D]
    return token_nll(cfg, top, run_layers(cfg, x, layer_at, hooks=hooks), tokens[:, 1:]).mean()


_POLICIES = {
    "dots": jax.checkpoint_policies.dots_saveable,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _layer_fn(cfg: TransformerConfig, attention_fn: AttentionFn, remat: str) -> Callable[[dict, jax.Array], jax.Array]:
    """One layer x [B, T, D] -> [B, T, D] wrapped in the checkpointing that ``remat`` asks for.

    Policies as in ``scalelib.transformer_memory.saved_activation_elements``: 'full' checkpoints
    the whole layer, 'block_inputs' each residual block, 'dots' / 'dots_no_batch' keep matmul
    outputs inside a layer checkpoint.
    """
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {remat!r}")
    hooks = LayerHooks(attention_fn=attention_fn)
    attn = lambda p, x: x + attention_block(cfg, p, x, hooks=hooks)  # noqa: E731
    mlp = lambda p, x: x + mlp_block(cfg, p, x, hooks)  # noqa: E731
    if remat == "block_inputs":
        attn, mlp = jax.checkpoint(attn), jax.checkpoint(mlp)
    layer = lambda p, x: mlp(p, attn(p, x))  # noqa: E731
    if remat == "full":
        layer = jax.checkpoint(layer)
    elif remat in _POLICIES:
        layer = jax.checkpoint(layer, policy=_POLICIES[remat])
    return layer


def hidden_states(params: Params, tokens: jax.Array, cfg: TransformerConfig, *, remat: str = "none",
                  attention_fn: AttentionFn = reference_attention, scan_layers: bool = False) -> jax.Array:
    """The last layer's output x [B, T, D] for integer tokens [B, T] (options as ``forward``)."""
    _check_model_config(cfg)
    layer = _layer_fn(cfg, attention_fn, remat)
    x = params["embed"][tokens]  # [B, T, D]
    if scan_layers:
        x, _ = jax.lax.scan(lambda h, p: (layer(p, h), None), x, params["layers"])  # [B, T, D]
    else:
        for i in range(cfg.n_layers):
            x = layer(layer_params(params, i), x)  # [B, T, D]
    return x


def forward(params: Params, tokens: jax.Array, cfg: TransformerConfig, *, remat: str = "none",
            attention_fn: AttentionFn = reference_attention, scan_layers: bool = False) -> jax.Array:
    """Logits [B, T, V] (float32) for integer tokens [B, T].

    ``scan_layers`` runs the layers with ``lax.scan`` (one compiled layer body, faster compiles)
    instead of an unrolled Python loop (what the FLOP tests use: XLA's cost analysis counts a
    loop body once). ``attention_fn`` can be ``scalelib.kernels.flash_attention``.
    """
    x = hidden_states(params, tokens, cfg, remat=remat, attention_fn=attention_fn, scan_layers=scan_layers)
    return logits(cfg, params, x)  # [B, T, V]


def loss(params: Params, tokens: jax.Array, cfg: TransformerConfig, **forward_kw: Any) -> jax.Array:
    """Mean next-token cross entropy: position t predicts token t + 1 (the last position has no target)."""
    x = hidden_states(params, tokens[:, :-1], cfg, **forward_kw)  # [B, T-1, D]
    return token_nll(cfg, params, x, tokens[:, 1:]).mean()
