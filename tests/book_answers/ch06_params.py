"""Chapter 6's LLaMA-3 parameter and FLOP counts, from scalelib.transformer's presets.

The book sums weight matrices only; the presets also hold the RMSNorm scales (1.3M for 70B,
4.1M for 405B), which is why their totals sit a hair above the book's and inside its tolerance.
"""

from scalelib import transformer as tf
from scalelib import transformer_flops as fl

_LETTERS = {"L": "n_layers", "D": "d_model", "F": "d_ff", "N": "n_heads", "K": "n_kv_heads", "H": "head_dim",
            "V": "vocab_size"}


def _preset(name: str, i: dict) -> tf.TransformerConfig:
    """The preset, after checking it has the shape the entry states."""
    cfg = tf.preset(name)
    wrong = {k: (i[k], getattr(cfg, f)) for k, f in _LETTERS.items() if k in i and i[k] != getattr(cfg, f)}
    if wrong:
        raise ValueError(f"preset {name} differs from the entry's inputs (entry, preset): {wrong}")
    return cfg


def _70b(i: dict) -> tf.ParamCounts:
    return tf.param_counts(_preset("llama3-70b", i))


REPRODUCERS = {
    "ch6-l3-70b-ffw-params": lambda i: _70b(i).mlp,
    "ch6-l3-70b-vocab-params": lambda i: _70b(i).vocab,
    "ch6-l3-70b-attn-params": lambda i: _70b(i).attention,
    "ch6-l3-70b-total-params": lambda i: _70b(i).total,
    "ch6-train-flops-per-token": lambda i: fl.six_n_train_flops(i["params"], 1),
    "ch6-ex6.2-l3-405b-params": lambda i: tf.param_counts(_preset("llama3-405b", i)).total,
    "ch6-ex6.2-l3-405b-train-flops-per-token": lambda i: fl.six_n_train_flops(
        tf.param_counts(tf.preset("llama3-405b")).total, 1),
}
