"""scalelib.transformer / transformer_flops / transformer_memory: exact counts and section 4's ratios."""

import pytest

from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib import transformer_memory as mem

# Totals published for these checkpoints (safetensors parameter counts), to the parameter.
PUBLISHED_TOTALS = {
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama2-13b": 13_015_864_320,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "gemma-2b": 2_506_172_416,
    "gemma-7b": 8_537_680_896,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTALS))
def test_preset_matches_published_total(name):
    assert tf.param_counts(tf.preset(name)).total == PUBLISHED_TOTALS[name]


def test_norm_free_totals_match_the_book_formula():
    # 3LDF + 2LD(N + K)H + (1 or 2) V D, i.e. everything but the norm scales.
    for name, want in (("llama3-405b", 405_849_243_648), ("llama3-70b", 70_552_387_584),
                       ("llama3-8b", 8_029_995_008), ("book-ch7-18b", 18_385_207_296)):
        p = tf.param_counts(tf.preset(name))
        assert p.total - p.norms == want, name


def test_moe_active_params():
    p = tf.param_counts(tf.preset("mixtral-8x7b"))
    assert p.active == pytest.approx(12.9e9, rel=2e-3)  # "12.9B active"
    one_expert = 3 * 4096 * 14336
    assert p.total - p.active == 32 * 6 * one_expert  # 6 of 8 experts idle per token


def test_config_errors_name_the_problem():
    with pytest.raises(ValueError, match="n_heads=6 is not divisible by n_kv_heads=4"):
        tf.TransformerConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=6, n_kv_heads=4, head_dim=2, d_ff=8)
    with pytest.raises(ValueError, match="experts_per_token"):
        tf.preset("llama3-8b").replace(n_experts=4, experts_per_token=5)
    with pytest.raises(KeyError, match="known presets"):
        tf.preset("gpt-5")


def test_six_n_rule_is_exact_for_weight_matmuls():
    cfg = tf.preset("llama3-8b")
    p = tf.param_counts(cfg)
    step = fl.train_flops(cfg, batch=2, seq_len=4096)
    weight_params = p.total - p.embedding - p.norms  # the gather and the norms do no matmul
    assert step.matmul_flops - step.attn_dot_flops == 6 * weight_params * 2 * 4096
    assert fl.six_n_train_flops(p.total, 1) == 6 * p.total


def test_backward_is_twice_forward_and_remat_adds_recompute():
    cfg = tf.preset("llama2-13b")
    fwd = fl.forward_flops(cfg, 4096, 4096)
    base = fl.train_flops(cfg, 1, 4096)
    assert base.total_flops == pytest.approx(3 * fwd.total_flops)
    order = [fl.train_flops(cfg, 1, 4096, remat=r).total_flops
             for r in ("none", "dots", "dots_no_batch", "block_inputs", "full")]
    assert order[0] == order[1] < order[2] < order[3] < order[4]
    # 'full' reruns every layer matmul but W_down, and never the unembedding.
    full_extra = order[4] - order[0]
    assert full_extra == pytest.approx(fwd.total_flops - fwd.unembed_flops - fwd.mlp_flops / 3)
    assert fl.train_flops_per_param_token("none") == 6 and fl.train_flops_per_param_token("full") == 8


def test_attention_crossover_is_8d_for_the_book_shape():
    cfg = tf.dense_mha_config(d_model=8192, n_layers=1, vocab_size=32_000)
    assert fl.attention_crossover_seq_len(cfg) == 8 * 8192
    at = fl.forward_flops(cfg, 1, 8 * 8192, include_unembed=False)
    assert at.attn_dot_flops == pytest.approx(at.mlp_flops + at.attn_proj_flops)
    assert fl.attention_equals_projection_seq_len(cfg) == 2 * 8192


def test_causal_skip_counts_the_lower_triangle():
    cfg = tf.dense_mha_config(d_model=256, n_layers=1, vocab_size=10, head_dim=64)
    full = fl.forward_flops(cfg, 8, 8).attn_qk_flops
    tri = fl.forward_flops(cfg, 8, 8, causal_skip=True).attn_qk_flops
    assert tri == full * (8 * 9 / 2) / 64


def test_moe_routed_vs_dense_compute():
    cfg = tf.preset("mixtral-8x7b")
    routed = fl.forward_flops(cfg, 1, 1)
    dense = fl.forward_flops(cfg, 1, 1, moe_compute="dense")
    assert dense.mlp_flops == 4 * routed.mlp_flops  # 8 experts executed instead of 2
    assert fl.moe_critical_batch_tokens(240, 256, 8, weight_bytes=1) == 3840


def test_attention_intensity_and_compute_bound_length():
    assert fl.attention_intensity(1000, 1000, 1) == pytest.approx(500)
    assert fl.attention_compute_bound_seq_len(240, 1) == 480
    assert fl.attention_intensity(1, 10_000, 8) == pytest.approx(8 * 10_000 / 10_008)  # decode: ~G


def test_sharded_contraction():
    per_dev, total = fl.sharded_contraction_flops({"b": 64, "d": 32, "f": 16}, {"b": ("X",), "d": ("Y",)},
                                                 {"X": 4, "Y": 8, "Z": 4})
    assert per_dev == 2 * 64 * 32 * 16 / 32 and total == 2 * 64 * 32 * 16 * 4
    with pytest.raises(ValueError, match="unknown mesh axis 'W'"):
        fl.sharded_contraction_flops({"b": 4}, {"b": ("W",)}, {"X": 2})


def test_kv_cache_is_gqa_and_dtype_aware():
    cfg = tf.preset("llama3-70b")
    assert mem.kv_cache_bytes_per_token(cfg, dtype_bytes=2) == 2 * 80 * 8 * 128 * 2
    mha = cfg.replace(n_kv_heads=64)
    assert mem.kv_cache_bytes_per_token(mha, 1) == 8 * mem.kv_cache_bytes_per_token(cfg, 1)
    assert mem.kv_cache_bytes(cfg, seq_len=8192, batch=4, dtype_bytes=1) == 4 * 8192 * 2 * 80 * 1024


def test_activation_memory_policies():
    cfg = tf.preset("llama3-8b")
    saved = {r: mem.activation_memory(cfg, 1, 4096, r).saved_bytes
             for r in ("none", "dots", "dots_no_batch", "block_inputs", "full")}
    assert saved["none"] > saved["dots"] > saved["dots_no_batch"] > saved["block_inputs"] > saved["full"]
    assert saved["full"] == 2 * 4096 * 4096 * 32  # one bf16 D vector per token and layer
    assert len(mem.saved_activation_elements(cfg, "dots_no_batch", 4096)) == 7
    with pytest.raises(ValueError, match="policy must be one of"):
        mem.saved_activation_elements(cfg, "some", 1)


def test_training_state_memory():
    state = mem.training_state_memory(1e9, param_bytes=2, adam_moment_bytes=4)
    assert (state.params_bytes + state.optimizer_bytes) / 1e9 == 10  # bf16 weights + fp32 moments
    assert state.total_bytes == 12e9
    assert mem.training_state_memory(1, 2, master_copy_bytes=4).optimizer_bytes == 12


def test_training_budget():
    assert mem.dense_flops_per_s(2e15) == 1e15
    assert mem.training_mfu(1e9, 1e12, 1.0, 6e21 / 3600) == pytest.approx(1.0)
