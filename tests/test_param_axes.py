"""scalelib.param_axes: every parameter of model.init has logical axes whose sizes are its shape."""

import jax
import pytest

from scalelib import model
from scalelib import param_axes as pa

CONFIGS = [
    model.small_config(),
    model.small_config(gated_mlp=False, tied_embeddings=True, final_norm=False),
    model.small_config(norm_bias=True, qkv_bias=True, o_bias=True),
    model.small_config(n_experts=4, experts_per_token=2, expert_d_ff=32, n_shared_experts=2, router_bias=True),
    model.small_config(n_experts=4, experts_per_token=1, gated_mlp=False),
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_axes_name_every_dimension_of_every_parameter(cfg):
    shapes = jax.eval_shape(lambda k: model.init(k, cfg), jax.random.key(0))
    sizes = pa.axis_sizes(cfg)
    leaves = pa.leaves_with_axes(shapes)
    assert len(leaves) == len(jax.tree.leaves(shapes))
    for path, leaf, axes in leaves:
        assert leaf.shape == tuple(sizes[a] for a in axes), (path, leaf.shape, axes)
    assert pa.is_moe(shapes) == cfg.is_moe


def test_unknown_parameter_says_where_to_add_it():
    with pytest.raises(KeyError, match="PARAM_AXES"):
        pa.axes_of("w_new")
