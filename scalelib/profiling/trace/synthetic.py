"""Traces laid out as an accelerator writes them, built from op times you choose (book section 9).

A CPU run cannot show what an accelerator's trace looks like. A TPU trace has one plane per core
(``/device:TPU:0``, ...) whose ``XLA Ops`` line holds the ops one after another, timed by the chip,
and whose ``XLA Modules`` line marks each run of the program; a collective runs asynchronously as a
``-start`` op and a ``-done`` op with other ops in between while the data moves. A GPU trace has one
line per stream, each kernel tagged with its HLO op, so a communication kernel on its own stream
can run at the same time as a compute kernel. ``device_trace`` writes either layout (serialized
exactly as an ``.xplane.pb``) from a list of op times, so the same reader and summaries can be tried
on it, and tests and exercises can pose cases a CPU never produces. It is a drawing of the layout,
not a measurement: say so wherever one is shown.
"""

from __future__ import annotations

from collections.abc import Sequence

OpTime = tuple[int, int, str, float, float]  # (device, step, op name, start s, duration s)


def _lanes(ops: Sequence[OpTime]) -> list[int]:
    """Lane of each op (in order): the first whose last op has ended, so ops in one lane never overlap."""
    ends: list[int] = []  # in picoseconds, as the trace stores times
    out = []
    for _, _, _, start, dur in ops:
        lane = next((i for i, end in enumerate(ends) if end <= round(start * 1e12)), len(ends))
        if lane == len(ends):
            ends.append(0)
        ends[lane] = round(start * 1e12) + round(dur * 1e12)
        out.append(lane)
    return out


def device_trace(ops: Sequence[OpTime], module: str = "jit_step", platform: str = "TPU") -> bytes:
    """Serialized XSpace with one ``/device:{platform}:{n}`` plane per device holding ``ops``.

    ``platform="TPU"``: the ops of a device go on one ``XLA Ops`` line, so they must not overlap.
    ``platform="GPU"``: ops that overlap go on separate stream lines, each op tagged with ``hlo_op``
    and ``hlo_module`` stats. Each (device, step) gets one ``XLA Modules`` event named ``module``
    spanning its ops, from which ``read`` recovers the steps; times are rounded to picoseconds.
    """
    from jax.profiler import ProfileData

    if not ops:
        raise ValueError("device_trace needs at least one (device, step, name, start_s, duration_s) op")
    if platform not in ("TPU", "GPU"):
        raise ValueError(f"platform must be 'TPU' or 'GPU', got {platform!r}")
    for _, _, name, start, dur in ops:
        if dur < 0 or start < 0:
            raise ValueError(f"op {name!r} has start {start} s and duration {dur} s; both must be >= 0")
    names = sorted({name for _, _, name, _, _ in ops} | {f"{module}(1)"})
    meta_id = {name: i for i, name in enumerate(names, start=1)}
    metadata = " ".join(f'event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for n, i in meta_id.items())
    metadata += ' stat_metadata { key: 1 value { id: 1 name: "hlo_op" } }'
    metadata += ' stat_metadata { key: 2 value { id: 2 name: "hlo_module" } }'

    def event(name: str, start_s: float, duration_s: float, tagged: bool = False) -> str:
        stats = (f' stats {{ metadata_id: 1 str_value: "{name}" }} stats {{ metadata_id: 2 str_value: "{module}" }}'
                 if tagged else "")
        return (f"events {{ metadata_id: {meta_id[name]} offset_ps: {round(start_s * 1e12)} "
                f"duration_ps: {round(duration_s * 1e12)}{stats} }}")

    planes = []
    for device in sorted({d for d, *_ in ops}):
        mine = sorted((o for o in ops if o[0] == device), key=lambda o: o[3])
        runs = []
        for step in sorted({o[1] for o in mine}):
            of_step = [o for o in mine if o[1] == step]
            start, end = min(o[3] for o in of_step), max(o[3] + o[4] for o in of_step)
            runs.append(event(f"{module}(1)", start, end - start))
        lanes = _lanes(mine)
        if platform == "TPU" and max(lanes) > 0:
            first = mine[lanes.index(1)]
            raise ValueError(f"op {first[2]!r} of TPU core {device} starts before the op before it ends; a core "
                             "runs its ops one at a time (write a collective as -start and -done ops), "
                             "or use platform='GPU'")
        lines = [f'lines {{ id: 1 name: "XLA Modules" timestamp_ns: 0 {" ".join(runs)} }}']
        for lane in range(max(lanes) + 1):
            events = " ".join(event(o[2], o[3], o[4], platform == "GPU") for o, k in zip(mine, lanes) if k == lane)
            line_name = "XLA Ops" if platform == "TPU" else f"Stream #{lane + 1}"
            lines.append(f'lines {{ id: {lane + 2} name: "{line_name}" timestamp_ns: 0 {events} }}')
        planes.append(f'planes {{ id: {device + 1} name: "/device:{platform}:{device}" {" ".join(lines)} {metadata} }}')
    return ProfileData.text_proto_to_serialized_xspace(" ".join(planes))
