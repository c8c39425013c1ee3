'''Second honest answers for chapters 06-10: every exercise answered a second way, from what the page shows.

Each answer is written differently from the solution (numpy instead of jax or plain arithmetic, loops instead of
vector code, helper functions, the properties and methods of the objects the test hands over) and never calls
the scalelib function its test compares with. Graded, each must earn full marks: whatever a student can use in
the visible checks is usable when graded (issue 20, item 3). ``python -m tests.second_answers.check_chapter
CHAPTER --open`` grades one chapter's answers (as a class is graded, and with all of scalelib reachable) and
prints each exercise's score.

Two answers use what ``help()`` shows on an object the test hands over and which the grader, at the time of
writing, sends as its fields only: ``ch06-choose-sharding`` reads ``cfg.ff_width`` (a ``TransformerConfig``
property) and ``ch09-exposed-comms`` reads ``op.end_s`` (an ``OpRun`` property). Both score 0 as a class is
graded until objects keep their properties and methods (issue 20, item 3), and full marks with the library
reachable: they are kept as they are, to prove that fix.
'''

from __future__ import annotations

SECOND: dict[str, dict[str, str]] = {
    "06_training_llama3": {
        "ch06-param-count": """
def _weights(rows, cols, copies=1):
    return rows * cols * copies

def llama_param_counts(L, D, F, N, K, H, V):
    per_layer = {
        "mlp": sum(_weights(D, F) for _ in ("gate", "up", "down")),
        "attention": _weights(D, N * H, 2) + _weights(D, K * H, 2),   # W_Q, W_O and W_K, W_V
        "norms": 2 * D,
    }
    mlp = per_layer["mlp"] * L
    attention = per_layer["attention"] * L
    vocab = _weights(V, D, 2)                  # input embedding and output projection, untied
    norms = per_layer["norms"] * L + D         # plus the final norm
    return (mlp, vocab, attention, mlp + vocab + attention + norms)
""",
        "ch06-train-flops": """
FORWARD_FLOPS_PER_PARAM = 2
BACKWARD_FLOPS_PER_PARAM = 4

def train_flops(n_params, tokens):
    per_token = (FORWARD_FLOPS_PER_PARAM + BACKWARD_FLOPS_PER_PARAM) * n_params
    return per_token, per_token * tokens
""",
        "ch06-train-time": """
def chips_in(shape, pods=1):
    chips = 1
    for side in shape:
        chips *= side
    return chips * pods

def training_seconds(total_flops, chips, flops_per_s, mfu):
    delivered = np.float64(chips) * flops_per_s * mfu   # FLOPs/s the whole slice really achieves
    return total_flops / delivered
""",
        "ch06-train-memory": """
BF16, FP32 = 2, 4

def training_bytes(n_params, D, L, batch_tokens, ckpts_per_layer):
    weights = BF16 * n_params
    adam = 2 * FP32 * n_params                     # first and second moments
    per_layer = ckpts_per_layer * batch_tokens * D * BF16
    ckpts = per_layer * L
    parts = (weights, adam, ckpts)
    return parts + (sum(parts),)
""",
        "ch06-chips-for-memory": """
def memory_chips(total_bytes, hbm_bytes_per_chip, chips):
    fewest = int(np.ceil(total_bytes / hbm_bytes_per_chip))
    share = total_bytes / chips
    return fewest, share
""",
        "ch06-fsdp-alone": """
def fsdp_alone(batch_tokens, seq_len, chips, flops_per_s, ici_bidi_bytes_per_s, n_axes):
    sequences, _ = divmod(batch_tokens, seq_len)
    alpha = flops_per_s / ici_bidi_bytes_per_s       # FLOPs per byte of one bidirectional axis
    per_chip = batch_tokens / chips
    return int(sequences), per_chip, alpha / n_axes
""",
        "ch06-mixed-split": """
M_X, M_Y = 2, 1   # FSDP over two axes, tensor parallelism over one

def mixed_split(B, F, N, flops_per_s, ici_bidi_bytes_per_s):
    alpha = flops_per_s / ici_bidi_bytes_per_s
    threshold = 4 * alpha ** 2 / (M_X * M_Y * F)
    coeffs = [F / (N * M_X), -B * F / (N * alpha), B / M_Y]
    a, b, c = coeffs
    if b * b - 4 * a * c < 0:
        return threshold, None
    roots = np.roots(coeffs)
    return threshold, float(max(roots.real))
""",
        # cfg.ff_width: a property of an object the test sends; needs issue 20 item 3's fix
        "ch06-choose-sharding": """
def _larger_root(a, b, c):
    disc = b * b - 4 * a * c
    return None if disc < 0 else (-b + disc ** 0.5) / (2 * a)

def _pow2_at_most(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p

def choose_fsdp_tp(chip, n_chips, global_batch_tokens, cfg):
    alpha = chip.flops_per_s("bf16") / chip.ici_bidi_bytes_per_s
    B, F, N = global_batch_tokens, cfg.ff_width, n_chips   # help(cfg): the width of the dense MLP
    target = _larger_root(F / (2 * N), -B * F / (N * alpha), B)
    if target is None:                     # nothing is compute-bound: the least communication
        target = (B * 2 * N / F) ** 0.5
    target = min(max(target, 1.0), N)
    x = min(2 ** int(round(np.log2(target))), _pow2_at_most(N))
    return x, _pow2_at_most(N // x)
""",
        "ch06-ex6-1-dcn": """
def dcn_check(batch_tokens, pods, pod_chips, flops_per_s, chips_per_host, dcn_bytes_per_s_per_host):
    hosts = -(-pod_chips // chips_per_host)          # a partly filled host still has its whole link
    pod_flops_per_s = pod_chips * flops_per_s
    pod_dcn_bytes_per_s = hosts * dcn_bytes_per_s_per_host
    return batch_tokens / pods, pod_flops_per_s / pod_dcn_bytes_per_s
""",
    },
    "07_inference": {
        "ch07-kv-cache": """
def kv_cache_bytes(L, K, H, value_bytes, seq_len, batch):
    one_layer = K * H * value_bytes * 2          # a key and a value of every KV head
    per_token = one_layer * L
    per_sequence = per_token * seq_len
    return per_token, per_sequence * batch

def sequences_outweighing(weight_bytes, kv_bytes_per_seq):
    whole, _ = divmod(weight_bytes, kv_bytes_per_seq)
    return int(whole) + 1                         # equal bytes do not outweigh: one more
""",
        "ch07-ex7-1-params": """
def _layer_params(D, F, N, K, H, E):
    experts = E if E > 0 else 1
    mlp = experts * 3 * D * F
    router = D * E                                # zero for a dense layer
    attention = D * N * H * 2 + D * K * H * 2     # W_Q, W_O; W_K, W_V
    norms = 2 * D
    return mlp + router + attention + norms

def chapter_model_params(L, D, F, N, K, H, V, E=0):
    total = 0
    for _ in range(L):
        total += _layer_params(D, F, N, K, H, E)
    return total + D + V * D                       # final norm; one shared table
""",
        "ch07-critical-batch": """
def generate_critical_batch(flops_per_s, hbm_bytes_per_s, weight_bytes, n_experts=1, experts_per_token=1):
    chip_intensity = flops_per_s / hbm_bytes_per_s          # FLOPs per byte the chip can feed
    dense = chip_intensity * (weight_bytes / 2)             # 2BDF FLOPs against w*DF bytes
    return dense * (n_experts / experts_per_token)
""",
        "ch07-step-time": """
def generate_step(n_params, weight_bytes, kv_bytes_per_seq, batch, chips, flops_per_s, hbm_bytes_per_s):
    # per chip: each holds 1/chips of the weights, of the caches and of the FLOPs
    cache_s = batch * kv_bytes_per_seq / chips / hbm_bytes_per_s
    load_s = weight_bytes / chips / hbm_bytes_per_s
    math_s = 2 * n_params * batch / chips / flops_per_s
    step = cache_s + (load_s if load_s >= math_s else math_s)
    return step, batch / step
""",
        "ch07-ex7-2-capacity": """
def kv_room(hbm_bytes, weight_bytes, kv_bytes_per_token, seq_len):
    free = hbm_bytes - weight_bytes
    per_sequence = kv_bytes_per_token * seq_len
    return free, free / kv_bytes_per_token, int(free // per_sequence)
""",
        "ch07-slice": """
def serving_slice(weight_bytes, chips, hbm_bytes_per_chip, hbm_bytes_per_s):
    worth = weight_bytes / hbm_bytes_per_chip
    smallest = 1
    while smallest < worth:            # whole chips, then doubled up to a power of two
        smallest *= 2
    per_chip = weight_bytes / chips
    return worth, smallest, per_chip / hbm_bytes_per_s, hbm_bytes_per_chip - per_chip
""",
        "ch07-model-parallel": """
def hbm_over_ici(hbm_bytes_per_s, ici_bidi_bytes_per_s):
    beta = hbm_bytes_per_s / ici_bidi_bytes_per_s
    return beta

def max_model_ways(d_ff, batch, beta):
    # T_ici = T_hbm where F / Y = B * beta
    return d_ff / batch / beta

def latency_bound_ways(batch, d_model, act_bytes, ici_one_way_bytes_per_s, hop_latency_s):
    message = batch * d_model * act_bytes
    bytes_in_one_latency = ici_one_way_bytes_per_s * hop_latency_s
    return message / bytes_in_one_latency
""",
        "ch07-ex7-7-2d": """
def two_d_weight_stationary(f_over_d, chips, n_axes_1d):
    best_x = np.sqrt(chips / (2 * f_over_d))
    # the cost 2D/X + 4FX/n at that X, in units of BD/(W sqrt(n))
    coefficient = (2 / best_x + 4 * f_over_d * best_x / chips) * np.sqrt(chips)
    one_d = 4 / n_axes_1d
    return float(best_x), float(coefficient), float((coefficient / one_d) ** 2)
""",
        "ch07-prefill-ratio": """
def prefill_and_ratio(n_params, prompt_tokens, prefill_chips, flops_per_s, mfu, step_s, batch, decode_tokens):
    prefill_flops = 2 * n_params * prompt_tokens
    prefill_s = prefill_flops / (mfu * flops_per_s * prefill_chips)
    seconds_per_answer = decode_tokens * step_s        # every slot frees once per answer
    queries = batch / seconds_per_answer
    return prefill_s, queries, prefill_s / (1 / queries)
""",
        "ch07-kv-transfer": """
def _dcn_bytes_per_s(chips, chips_per_host, per_host):
    hosts = -(-chips // chips_per_host)
    return hosts * per_host

def kv_transfer(kv_bytes, sender_chips, receiver_chips, chips_per_host, dcn_bytes_per_s_per_host, prefill_s):
    pace = min(_dcn_bytes_per_s(c, chips_per_host, dcn_bytes_per_s_per_host) for c in (sender_chips, receiver_chips))
    seconds = kv_bytes / pace
    return seconds, seconds / prefill_s
""",
        "ch07-cached-attention": """
def cached_attention_step(q, k_new, v_new, k_cache, v_cache, length):
    k_cache = k_cache.at[:, :, length, :].set(k_new)
    v_cache = v_cache.at[:, :, length, :].set(v_new)
    n_heads, head = q.shape[1], q.shape[2]
    group = n_heads // k_cache.shape[1]
    keys = jnp.repeat(k_cache, group, axis=1)              # [B, N, S, H]: KV head n // group for query head n
    values = jnp.repeat(v_cache, group, axis=1)
    scores = jnp.einsum("bnh,bnsh->bns", q, keys) / jnp.sqrt(head)
    filled = jnp.arange(k_cache.shape[2]) <= length
    scores = jnp.where(filled, scores, -1e30)
    weights = jnp.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return jnp.einsum("bns,bnsh->bnh", weights, values), k_cache, v_cache
""",
        "ch07-lfu-order": """
def lfu_order(kept, hits, released):
    by_reuses = {}
    for block in kept:
        by_reuses.setdefault(hits[block], []).append(block)
    order = []
    for count in sorted(by_reuses):
        order.extend(sorted(by_reuses[count], key=released.get))
    return tuple(order)
""",
        "ch07-block-allocator": """
import copy

def pool_allocate(state, n):
    if len(state["free"]) < n:
        return state, None
    new = copy.deepcopy(state)
    blocks = [new["free"].pop(0) for _ in range(n)]
    for b in blocks:
        new["refcount"][b] += 1
    return new, blocks

def pool_share(state, blocks):
    new = copy.deepcopy(state)
    for b in blocks:
        new["refcount"][b] += 1
    return new

def pool_release(state, blocks):
    new = copy.deepcopy(state)
    for b in blocks:
        new["refcount"][b] -= 1
        if new["refcount"][b] == 0:
            new["free"].append(b)
    return new
""",
        "ch07-schedule-step": """
def _blocks_for(tokens, block_size):
    return math.ceil(tokens / block_size)

def schedule_step(running, waiting, token_budget, max_running, free_blocks, block_size):
    queue = [tuple(s) for s in running]
    budget, free = token_budget, free_blocks
    scheduled, preempted = [], []
    pos, stop = 0, False
    while pos < len(queue) and budget > 0 and not stop:
        seq_id, computed, total, held = queue[pos]
        n = min(total - computed, budget)
        need = _blocks_for(computed + n, block_size) - held
        while need > free:
            newest = queue.pop()               # the newest running sequence not yet scheduled
            preempted.append(newest[0])
            if newest[0] == seq_id:            # it was the one asking: the stage ends
                stop = True
                break
            free += newest[3]
        if stop:
            break
        scheduled.append([seq_id, n])
        budget -= n
        free -= need
        pos += 1
    if preempted:
        return scheduled, preempted
    running_now = len(queue)
    for seq_id, total in waiting:
        if budget <= 0 or running_now >= max_running:
            break
        n = min(total, budget)
        need = _blocks_for(n, block_size)
        if need > free:
            break
        scheduled.append([seq_id, n])
        budget, free, running_now = budget - n, free - need, running_now + 1
    return scheduled, preempted
""",
        "ch07-spec-accept": """
def _inverse_cdf(weights, v):
    cdf = np.cumsum(weights)
    above = np.nonzero(cdf > v * cdf[-1])[0]
    return int(above[0]) if len(above) else len(weights) - 1

def speculative_accept(p, q, draft, u, v):
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    for i, token in enumerate(draft):
        if u[i] >= min(1.0, p[i, token] / q[i, token]):      # rejected: sample what is left of the target
            leftover = np.maximum(p[i] - q[i], 0.0)
            return i, _inverse_cdf(leftover if leftover.sum() > 0 else p[i], v)
    return len(draft), _inverse_cdf(p[len(draft)], v)
""",
    },
    "08_serving_llama3": {
        "ch08-flops-per-dollar": """
SECONDS_PER_HOUR = 60 * 60

def flops_per_dollar(flops_per_s, usd_per_hour):
    seconds_per_dollar = SECONDS_PER_HOUR / usd_per_hour
    return flops_per_s * seconds_per_dollar
""",
        "ch08-smallest-slice": """
def _power_of_two_slice(nbytes, hbm_bytes_per_chip):
    chips = 1
    while chips * hbm_bytes_per_chip < nbytes:
        chips *= 2
    return chips

def smallest_slice_row(n_params, value_bytes, L, K, H, seq_len, hbm_bytes_per_chip):
    weights = n_params * value_bytes
    per_token = L * (K * H * value_bytes) * 2              # keys and values of every layer
    chips = _power_of_two_slice(weights, hbm_bytes_per_chip)
    free = chips * hbm_bytes_per_chip - weights
    caches = int(free // (per_token * seq_len))
    return weights, per_token, weights / hbm_bytes_per_chip, chips, free, caches
""",
        "ch08-full-batch-qps": """
def full_batch_qps(chips, hbm_bytes_per_chip, hbm_bytes_per_s, flops_per_s, n_params, weight_bytes,
                   kv_bytes_per_seq, decode_tokens):
    room = chips * hbm_bytes_per_chip - weight_bytes
    batch = int(room // kv_bytes_per_seq)
    # per chip: its share of the caches, of the weights and of the FLOPs
    caches_s = batch * kv_bytes_per_seq / chips / hbm_bytes_per_s
    weights_s = weight_bytes / chips / hbm_bytes_per_s
    flops_s = 2 * n_params * batch / chips / flops_per_s
    step = caches_s + max(weights_s, flops_s)
    qps = batch / decode_tokens / step
    return batch, step, qps / chips
""",
        "ch08-latency-curve": """
def _step(batch, chips, n_params, weight_bytes, kv_bytes_per_seq, flops_per_s, hbm_bytes_per_s):
    hbm = chips * hbm_bytes_per_s
    return batch * kv_bytes_per_seq / hbm + max(weight_bytes / hbm, 2 * n_params * batch / (chips * flops_per_s))

def latency_curve(batches, chips, n_params, weight_bytes, kv_bytes_per_seq, flops_per_s, hbm_bytes_per_s):
    steps, per_chip = [], []
    for b in batches.tolist():
        t = _step(float(b), chips, n_params, weight_bytes, kv_bytes_per_seq, flops_per_s, hbm_bytes_per_s)
        steps.append(t)
        per_chip.append(b / t / chips)
    return np.array(steps), np.array(per_chip)
""",
        "ch08-thresholds": """
def serving_thresholds(n_params, weight_value_bytes, kv_bytes_per_token, flops_per_s, hbm_bytes_per_s):
    critical = (flops_per_s / hbm_bytes_per_s) * (weight_value_bytes / 2)
    flops_s_per_sequence = 2 * n_params / flops_per_s       # its weight matmuls
    read_s_per_token = kv_bytes_per_token / hbm_bytes_per_s # its cache, one token of context
    return critical, flops_s_per_sequence / read_s_per_token
""",
        "ch08-sharded-matmul": """
def sharded_matmul_times(B, D, F, Y, weight_bytes, act_bytes, flops_per_s, hbm_bytes_per_s, ici_bidi_bytes_per_s):
    ici_s = 0.0
    if Y > 1:
        ici_s = (B * D * act_bytes) / ici_bidi_bytes_per_s       # gather the whole [B, D]
    columns = F / Y                                            # this chip's share of W[D, F]
    hbm_s = D * columns * weight_bytes / hbm_bytes_per_s
    math_s = 2 * B * D * columns / flops_per_s
    clocks = [(ici_s, "ici"), (hbm_s, "hbm"), (math_s, "math")]
    return ici_s, hbm_s, math_s, max(clocks)[1]
""",
        "ch08-prefill-evictions": """
def prefill_plan(n_params, prompt_tokens, answer_tokens, batch, step_s, prefill_chips, flops_per_s, mfu):
    prefill_s = (2 * n_params) * prompt_tokens / (flops_per_s * mfu) / prefill_chips
    finished = batch * (1 / answer_tokens)               # each sequence is 1 / answer_tokens done per step
    evicted = finished * prompt_tokens + finished * answer_tokens
    requests_per_s = finished / step_s
    return prefill_s, finished, evicted, requests_per_s * prefill_s
""",
        "ch08-ex8-1-bounds": """
def forward_bounds(n_params, chips, flops_per_s, hbm_bytes_per_s, weight_value_bytes):
    flops = n_params * 2
    compute = flops / chips / flops_per_s
    read = (n_params * weight_value_bytes / chips) / hbm_bytes_per_s
    return flops, compute, read
""",
        "ch08-ex8-2-small-model": """
def serving_footprint(n_params, L, K, H, value_bytes, batch, seq_len, hbm_bytes_per_chip):
    weights = n_params * value_bytes
    per_token = 2 * L * K * H * value_bytes
    caches = per_token * seq_len * batch
    chips = 1
    while chips * hbm_bytes_per_chip < weights + caches:
        chips *= 2
    return weights, caches, chips
""",
        "ch08-ex8-3-plan": """
def plan_serving(n_params, weight_bytes, kv_bytes_per_seq, hbm_bytes_per_chip, hbm_bytes_per_s, flops_per_s,
                 max_step_s, max_chips):
    found = {}                                  # chips -> (tokens per second per chip, batch)
    chips = 1
    while chips <= max_chips:
        hbm = chips * hbm_bytes_per_s
        kv_s, weights_s, flops_s = kv_bytes_per_seq / hbm, weight_bytes / hbm, 2 * n_params / (chips * flops_per_s)
        step = lambda b: b * kv_s + max(weights_s, b * flops_s)
        room = chips * hbm_bytes_per_chip - weight_bytes
        fit = int(room // kv_bytes_per_seq) if room >= 0 else 0
        if fit >= 1 and step(1) <= max_step_s:
            # step <= limit holds in both regimes: b kv_s + weights_s <= limit and b (kv_s + flops_s) <= limit
            batch = min(fit, int(min((max_step_s - weights_s) / kv_s, max_step_s / (kv_s + flops_s))))
            while batch > 1 and step(batch) > max_step_s:    # rounding at the edge
                batch -= 1
            while batch < fit and step(batch + 1) <= max_step_s:
                batch += 1
            found[chips] = (batch / step(batch) / chips, batch)
        chips *= 2
    if not found:
        return None
    best = max(t for t, _ in found.values())
    chips = min(c for c, (t, _) in found.items() if t >= best * (1 - 1e-9))
    return chips, found[chips][1]
""",
    },
    "09_profiling": {
        "ch09-padding": """
def padding_factor(shape, tile):
    shape = list(shape)
    while len(shape) < len(tile):
        shape.insert(0, 1)                         # extra leading dims of size 1
    padded = np.array(shape, dtype=np.int64)
    sizes = np.array(tile, dtype=np.int64)
    minor = padded[len(shape) - len(tile):]
    padded[len(shape) - len(tile):] = np.ceil(minor / sizes).astype(np.int64) * sizes
    return float(np.prod(padded) / np.prod(np.array(shape, dtype=np.int64)))
""",
        "ch09-tiled-offset": """
def _fit(tile, rank):
    return (1,) * (rank - len(tile)) + tuple(tile)

def _slots(block, levels):
    # slots one block takes when cut by the nested tiles ``levels``, padding included
    total = 1
    for tile in levels:
        tile = _fit(tile, len(block))
        for d, t in zip(block, tile):
            total *= -(-d // t)
        block = tile
    for d in block:
        total *= d
    return total

def _row_major(ix, dims):
    flat = 0
    for i, d in zip(ix, dims):
        flat = flat * d + i
    return flat

def element_offset(index, shape, tiles):
    ix, block, levels = list(index), list(shape), [tuple(t) for t in tiles]
    slot = 0
    for k, tile in enumerate(levels):
        tile = _fit(tile, len(block))
        grid = [-(-d // t) for d, t in zip(block, tile)]
        which = _row_major([i // t for i, t in zip(ix, tile)], grid)
        slot += which * _slots(list(tile), levels[k + 1:])
        ix, block = [i % t for i, t in zip(ix, tile)], list(tile)
    return slot + _row_major(ix, block)
""",
        "ch09-layout-bytes": """
def _slots(block, tiles):
    if not tiles:
        return math.prod(block)
    tile = tuple(tiles[0])
    if len(tile) > len(block):
        block = (1,) * (len(tile) - len(block)) + tuple(block)
    tile = (1,) * (len(block) - len(tile)) + tile
    count = math.prod(-(-d // t) for d, t in zip(block, tile))
    return count * _slots(tile, tiles[1:])

def layout_bytes(type_text):
    text = type_text.strip()
    dtype, _, rest = text.partition("[")
    dims_text, _, layout = rest.partition("]")
    shape = [int(d) for d in dims_text.split(",") if d.strip()]
    layout = layout.strip()
    order_text, tiles, memory = None, [], "HBM"
    if layout.startswith("{"):
        inner = layout[1:layout.rindex("}")]
        order_text, _, extra = inner.partition(":")
        if "T(" in extra:
            tile_text = extra[extra.index("T(") + 1:]
            while tile_text.startswith("("):
                close = tile_text.index(")")
                tiles.append(tuple(int(x) for x in tile_text[1:close].split(",")))
                tile_text = tile_text[close + 1:]
        if "S(" in extra:
            space = int(extra[extra.index("S(") + 2:].split(")")[0])
            memory = "HBM" if space == 0 else "VMEM" if space == 1 else f"S({space})"
    if order_text is None or not order_text.strip():
        physical = tuple(shape)                     # row-major
    else:
        minor_to_major = [int(d) for d in order_text.split(",")]
        physical = tuple(shape[d] for d in minor_to_major[::-1])
    size = DTYPE_BYTES[dtype]
    return physical, math.prod(shape) * size, _slots(physical, tiles) * size, memory
""",
        "ch09-hlo-collectives": """
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")

def _split_type(rhs):
    # the result type runs to the first space outside brackets: "(f32[2]{0}, s32[]) all-reduce(...)"
    depth = 0
    for i, ch in enumerate(rhs):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == " " and depth == 0:
            return rhs[:i], rhs[i + 1:]
    return rhs, ""

def _type_bytes(type_text):
    total = 0
    for dtype, dims in re.findall(r"(\\w+)\\[([\\d,]*)\\]", type_text):
        count = 1
        for d in dims.split(","):
            if d:
                count *= int(d)
        total += count * DTYPE_BYTES[dtype]
    return total

def collectives_in(hlo_text):
    text = re.sub(r"/\\*.*?\\*/", "", hlo_text)
    found = []
    for line in text.splitlines():
        if " = " not in line:
            continue
        rhs = line.split(" = ", 1)[1].strip()
        result, rest = _split_type(rhs)
        if "(" not in rest:
            continue
        opcode = rest[:rest.index("(")]
        base = opcode[:-len("-start")] if opcode.endswith("-start") else opcode
        if base not in COLLECTIVES:
            continue
        nbytes = _type_bytes(result)
        if opcode.endswith("-start") and result.startswith("("):
            nbytes //= 2
        found.append((base.replace("-", "_"), nbytes))
    return found
""",
        "ch09-einsum-estimate": """
def _parse(operand):
    inside = re.search(r"\\[(.*)\\]", operand).group(1)
    dims = []
    for part in inside.split(","):
        name, axes = (part.strip().split("_") + [""])[:2]
        dims.append((name, axes))
    return dims

def einsum_estimate(lhs, rhs, sizes, mesh, flops_per_s):
    local = lambda name, axes: sizes[name] // int(np.prod([mesh[a] for a in axes] or [1]))
    left, right = _parse(lhs), _parse(rhs)
    lhs_shape = tuple(local(n, a) for n, a in left)
    contracted = {n for n, _ in left} & {n for n, _ in right}
    rhs_free = [local(n, a) for n, a in right if n not in contracted]
    flops = 2 * float(np.prod(lhs_shape)) * float(np.prod(rhs_free))
    return lhs_shape, flops, flops / flops_per_s
""",
        "ch09-reduce-scatter": """
def down_projection(B, T, D, F, X, Y, dtype_bytes, flops_per_s, ici_bidi_bytes_per_s):
    b_local, f_local = B / X, F / Y                 # Tmp[B_X, T, F_Y], Wout[F_Y, D]
    flops = 2 * b_local * T * f_local * D
    partial = b_local * T * D * dtype_bytes          # Out[B_X, T, D] before it is reduced over Y
    compute_s = flops / flops_per_s
    scatter_s = partial / ici_bidi_bytes_per_s
    return compute_s, partial, scatter_s, compute_s if compute_s > scatter_s else scatter_s
""",
        "ch09-dominant-op": """
from collections import defaultdict

def dominant_op(ops):
    per_name = defaultdict(float)
    for op in ops:
        per_name[op.name] += op.duration_s
    ranked = sorted(per_name.items(), key=lambda item: item[1], reverse=True)
    name, longest = ranked[0]
    return name, longest / sum(per_name.values())
""",
        # op.end_s: a property of an object the test sends; needs issue 20 item 3's fix
        "ch09-exposed-comms": """
def _covered(intervals, a, b):
    return any(start <= a and b <= end for start, end in intervals)

def exposed_fraction(ops, device):
    mine = [op for op in ops if op.device == device]
    comms = [(op.start_s, op.end_s) for op in mine if op.kind == "collective"]
    work = [(op.start_s, op.end_s) for op in mine if op.kind == "compute"]
    edges = sorted({t for pair in comms + work for t in pair})
    exposed = 0.0
    for a, b in zip(edges, edges[1:]):                 # pieces between consecutive edges
        if _covered(comms, a, b) and not _covered(work, a, b):
            exposed += b - a
    step = max(op.end_s for op in ops) - min(op.start_s for op in ops)
    return exposed / step
""",
        "ch09-roofline-gap": """
import statistics

def roofline_gap(ops, name, flops_per_s, bytes_per_s):
    runs = [op for op in ops if op.name == name]
    measured = statistics.median([op.duration_s - op.wait_s for op in runs])
    allowed = max(runs[0].flops / flops_per_s, runs[0].bytes / bytes_per_s)
    return measured, allowed, measured / allowed
""",
    },
    "10_jax": {
        "ch10-local-shape": """
from itertools import zip_longest

def _axes(entry):
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)

def local_shape(global_shape, mesh_shape, spec):
    block = []
    for size, entry in zip_longest(global_shape, tuple(spec)):
        if size is None:
            break
        ways = int(np.prod([mesh_shape[a] for a in _axes(entry)], dtype=np.int64))
        block.append(size // ways)
    return tuple(block)
""",
        "ch10-slice-mean": """
def slice_mean(n, devices, k):
    blocks = np.arange(n, dtype=np.int64).reshape(devices, n // devices)   # device d holds row d
    return blocks[:, :k].mean(axis=0).tolist()
""",
        "ch10-allgather-matmul": """
def allgather_collective_matmul(a_block, w_block, axis):
    size, me = jax.lax.axis_size(axis), jax.lax.axis_index(axis)
    cols = a_block.shape[1]
    left = [(j, (j - 1) % size) for j in range(size)]      # every device passes its block to the one before

    def w_part(owner):
        start = (owner % size) * cols
        return jax.lax.dynamic_slice(w_block, (start, 0), (cols, w_block.shape[1]))

    partials = [jnp.matmul(a_block.astype(jnp.float32), w_part(me).astype(jnp.float32))]
    block = a_block
    for hop in range(1, size):
        block = jax.lax.ppermute(block, axis, left)         # now the A block of device me + hop
        partials.append(jnp.matmul(block.astype(jnp.float32), w_part(me + hop).astype(jnp.float32)))
    return sum(partials[1:], partials[0])
""",
        "ch10-reduce-scatter-matmul": """
def reduce_scatter_collective_matmul(t_block, w_block, axis):
    size, me = jax.lax.axis_size(axis), jax.lax.axis_index(axis)
    width = w_block.shape[1] // size
    left = [(j, (j - 1) % size) for j in range(size)]      # one way round: to the previous device

    def for_owner(owner):
        w_cols = jax.lax.dynamic_slice(w_block, (0, (owner % size) * width), (w_block.shape[0], width))
        return t_block.astype(jnp.float32) @ w_cols.astype(jnp.float32)

    # going -1, the sum device i starts reaches device i - (size - 1) = i + 1 after size - 1 hops
    running = for_owner(me + 1)
    for hop in range(1, size):
        running = jax.lax.ppermute(running, axis, left)
        running = running + for_owner(me + 1 + hop)        # it was started by me + hop, bound for me + hop + 1
    return running
""",
        "ch10-overlap-time": """
def ring_matmul_times(kind, batch, k, n_out, axis_size, batch_shards, flops_per_s, link_bytes_per_s, dtype_bytes):
    rows = batch / batch_shards
    chunk_flops = 2 * rows * (k / axis_size) * (n_out / axis_size)
    moved = k if kind == "all_gather" else n_out            # A's columns travel, or the partial sums' columns
    message_bytes = rows * (moved / axis_size) * dtype_bytes
    chunk, message = chunk_flops / flops_per_s, message_bytes / link_bytes_per_s
    sends = axis_size - 1                                  # the last round computes only
    overlapped = sends * max(chunk, message) + chunk
    serial = axis_size * chunk + sends * message
    return [overlapped, serial, np.less_equal(message, chunk)]  # a list, and a NumPy bool
""",
        "ch10-hiding-width": """
def min_hiding_dim(flops_per_s, link_bytes_per_s, dtype_bytes, axis_size):
    # per device, a chunk of F/Y columns takes 2 (B/X)(D/Y)(F/Y) / C; its message (B/X)(D/Y) bytes / W
    columns_per_device = (dtype_bytes / 2) * (flops_per_s / link_bytes_per_s)
    return float(columns_per_device * axis_size)
""",
    },
}
