"""Training parallelism (book section 5): one module per scheme, one interface, one registry.

Every scheme is a frozen dataclass implementing ``scheme.Scheme``: how it shards the weights,
optimizer state and tokens (rules over the model's logical axes, ``specs``), its ``shard_map``
step with the collectives written out, its predicted collectives, memory and FLOPs (each held
against the compiled program by tests/test_parallel_schemes.py), its single-device reference,
and its terms in the book's per-layer cost model, which ``pricing``, ``chip_memory`` and ``planner`` reach
through the registry by the scheme's name::

    from scalelib import compat, parallel, train
    scheme = parallel.get("fsdp")(stage=3)                     # or fsdp.FSDP(stage=3)
    mesh = compat.make_mesh((8,), scheme.mesh_axes)
    state, tokens = scheme.shard_inputs(state, tokens, mesh)
    step = scheme.make_step(cfg, mesh, train.Adam())          # step(state, tokens) -> (state, loss)
    scheme.predicted_collectives(cfg, dict(mesh.shape), batch, seq_len)

Adding a scheme is one file and one line: write ``parallel/<name>.py`` with a ``Scheme`` subclass
decorated ``@registry.register`` (shared pieces live in ``common``, ``specs``, ``blocks``, ``layer``,
``context`` and ``thresholds``; never another scheme's module), then import it in the line below. The order
of that line is the order the planner lists schemes in.

Imports point one way (tests/test_import_graph.py): below the scheme modules sit ``layout``,
``layer``, ``context`` (what the planner asks a scheme), ``thresholds`` (the book's closed forms), ``scheme``
(the interface) and ``registry`` (where they register); above them ``pricing`` and ``chip_memory`` (which ask
each scheme through the registry), then ``planner``.
"""

from scalelib.parallel import data, fsdp, tensor, fsdp_tp, pipeline, expert, multislice, sequence  # noqa: F401
from scalelib.parallel.registry import SCHEMES, get, names
from scalelib.parallel.scheme import Collective, MemoryPrediction, Scheme

__all__ = ["SCHEMES", "Collective", "MemoryPrediction", "Scheme", "get", "names"]
