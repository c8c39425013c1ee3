"""scalelib.serving.scheduler.plan_step: the documented policy, by hand and as invariants on random states."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib.serving.scheduler import SeqView, blocks_for, plan_step
from tests.serving_common import no_block_leaks  # noqa: F401

BS = 4


def plan(running, waiting, budget=16, max_running=4, free=100, chunk=None):
    return plan_step(running, waiting, token_budget=budget, max_running=max_running, free_blocks=free,
                     block_size=BS, max_chunk=chunk)


def test_decodes_first_then_prompt_chunks_in_arrival_order():
    running = [SeqView(0, 8, 9, 3), SeqView(1, 4, 20, 1)]  # a decode, then a prompt half done
    waiting = [SeqView(2, 0, 10, 0), SeqView(3, 0, 5, 0)]
    p = plan(running, waiting, budget=20)
    assert p.scheduled == ((0, 1), (1, 16), (2, 3)) and p.preempted == ()
    assert plan(running, waiting, budget=20, chunk=5).scheduled == ((0, 1), (1, 5), (2, 5), (3, 5))
    assert plan(running, waiting, budget=20, max_running=3).scheduled == ((0, 1), (1, 16), (2, 3))
    assert plan(running, waiting, budget=1).scheduled == ((0, 1),)


def test_when_blocks_run_out_the_newest_is_preempted():
    running = [SeqView(0, 8, 9, 2), SeqView(1, 8, 9, 2), SeqView(2, 8, 9, 2)]  # each needs a third block
    p = plan(running, [SeqView(3, 0, 2, 0)], free=1)
    assert p.scheduled == ((0, 1), (1, 1)) and p.preempted == (2,)  # seq 2's 2 blocks pay for seq 1's
    assert plan(running, [], free=0).preempted == (2,)  # seq 2's blocks pay for both others
    shared = [SeqView(i, 8, 9, 2, freeable=1) for i in range(3)]  # each holds one block shared with another
    p = plan(shared, [], free=0)
    assert p.scheduled == ((0, 1),) and p.preempted == (2, 1)  # seq 1, now the newest, preempts itself
    alone = plan([SeqView(5, 8, 9, 2, freeable=2)], [], free=0)
    assert alone.scheduled == () and alone.preempted == (5,)  # it is the newest: it goes itself


def test_admission_stops_at_the_first_prompt_that_does_not_fit():
    waiting = [SeqView(0, 0, 12, 0), SeqView(1, 0, 2, 0)]
    assert plan([], waiting, free=2).scheduled == ()  # seq 1 would fit but may not overtake
    hit = SeqView(0, 8, 12, 2, revive=2)  # a prefix hit on two free cached blocks
    assert plan([], [hit], free=3).scheduled == ((0, 4),)  # 1 new block + 2 revived
    assert plan([], [hit], free=2).scheduled == ()


@st.composite
def states(draw):
    def view(i, waiting):
        total = draw(st.integers(1, 40))
        computed = draw(st.integers(0, total - 1))
        if waiting:
            computed -= computed % BS
        blocks = blocks_for(computed, BS) + (0 if waiting else draw(st.integers(0, 1)))
        return SeqView(i, computed, total, blocks, freeable=draw(st.integers(0, blocks)),
                       revive=draw(st.integers(0, blocks)) if waiting else 0)
    n_run, n_wait = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    return ([view(i, False) for i in range(n_run)], [view(i, True) for i in range(n_run, n_run + n_wait)],
            draw(st.integers(1, 24)), draw(st.integers(1, 6)), draw(st.integers(0, 12)), draw(st.sampled_from([None, 3])))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(states())
def test_plans_respect_budget_blocks_order_and_limits(state):
    running, waiting, budget, max_running, free, chunk = state
    p = plan(running, waiting, budget, max_running, free, chunk)
    views = {v.seq_id: v for v in running + waiting}
    ns = dict(p.scheduled)
    assert sum(ns.values()) <= budget and all(1 <= n <= views[i].total - views[i].computed for i, n in ns.items())
    assert all(n <= chunk for n in ns.values()) if chunk else True
    run_ids, wait_ids = [v.seq_id for v in running], [v.seq_id for v in waiting]
    kept = [i for i in run_ids if i not in p.preempted]
    assert list(p.preempted) == run_ids[::-1][:len(p.preempted)]  # the newest go, newest first
    scheduled_run = [i for i, _ in p.scheduled if i in run_ids]
    assert scheduled_run == kept[:len(scheduled_run)]  # oldest first, no skipping
    admitted = [i for i, _ in p.scheduled if i in wait_ids]
    assert admitted == wait_ids[:len(admitted)] and (not admitted or not p.preempted)
    assert len(kept) + len(admitted) <= max(max_running, len(kept))
    need = sum(blocks_for(views[i].computed + n, BS) - views[i].blocks + views[i].revive for i, n in p.scheduled)
    assert need <= free + sum(views[i].freed_if_preempted for i in p.preempted)
    if len(scheduled_run) < len(kept):  # a running sequence was left out only for want of budget
        assert sum(ns.values()) == budget


def test_shortest_prompt_first_admits_by_remaining_tokens_and_keeps_the_running_order():
    from scalelib.serving.scheduler import shortest_prompt_first

    running = [SeqView(0, 8, 9, 3)]
    waiting = [SeqView(1, 0, 14, 0), SeqView(2, 0, 3, 0), SeqView(3, 4, 9, 1), SeqView(4, 0, 3, 0)]
    sizes = {"token_budget": 16, "max_running": 3, "free_blocks": 100, "block_size": BS, "max_chunk": None}
    assert plan_step(running, waiting, **sizes).scheduled == ((0, 1), (1, 14), (2, 1))  # arrival order
    assert shortest_prompt_first(running, waiting, **sizes).scheduled == ((0, 1), (2, 3), (4, 3))  # 3, 3 (ties: id)
    assert shortest_prompt_first(running, [], **sizes) == plan_step(running, [], **sizes)


def test_a_schedule_policy_is_a_field_of_the_engine_and_keeps_the_tokens():
    """On a long prompt followed by short ones, shortest-first gives the short ones their first token sooner (in
    steps, not seconds: machines are noisy), with the same greedy tokens."""
    from scalelib.serving import engine, request
    from scalelib.serving.scheduler import shortest_prompt_first
    from tests.serving_common import CFG, MAX_NEW, PROMPTS, config, params, plain

    prompts = [PROMPTS[6], PROMPTS[7], PROMPTS[0], PROMPTS[1], PROMPTS[2]]  # 19, 19 tokens, then three of 7
    reqs = [request.request(p, MAX_NEW) for p in prompts]
    first_step = {}
    for name, policy in (("fcfs", engine.EngineConfig.schedule), ("spf", shortest_prompt_first)):
        eng = engine.Engine(params(), CFG, config(schedule=policy, max_running=2, token_budget=8))
        results = eng.run(reqs)
        assert [r.tokens for r in results] == [plain(p) for p in prompts], name
        steps = {}
        for rec in eng.records:  # the step in which each request's prompt was done
            for sid, _n, kind in rec.entries:
                if kind == "decode":
                    steps.setdefault(sid, rec.index)
        first_step[name] = sum(steps[i] for i in (2, 3, 4)) / 3
    assert first_step["spf"] < first_step["fcfs"], first_step
