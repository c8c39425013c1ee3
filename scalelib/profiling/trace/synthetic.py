"""Traces laid out as an accelerator writes them, built from op times you choose (book section 9).

A CPU run cannot show what an accelerator's trace looks like: one plane per chip (``/device:TPU:0``,
...) whose ``XLA Ops`` line holds the ops timed by the chip and whose ``XLA Modules`` line marks
each run of the program, with asynchronous collectives split into a ``-start`` and a ``-done`` op
and other ops running between the two while the data moves. ``device_trace`` writes such a trace
(serialized exactly as an ``.xplane.pb``) from a list of op times, so the same reader and summaries
can be tried on it, and tests and exercises can pose cases a CPU never produces. It is a drawing of
the layout, not a measurement: say so wherever one is shown.
"""

from __future__ import annotations

from collections.abc import Sequence

OpTime = tuple[int, int, str, float, float]  # (device, step, op name, start s, duration s)


def device_trace(ops: Sequence[OpTime], module: str = "jit_step", platform: str = "TPU") -> bytes:
    """Serialized XSpace with one ``/device:{platform}:{n}`` plane per device holding ``ops``.

    Each (device, step) gets one ``XLA Modules`` event named ``module`` spanning its ops, so
    ``read`` recovers the steps; times are rounded to picoseconds.
    """
    from jax.profiler import ProfileData

    if not ops:
        raise ValueError("device_trace needs at least one (device, step, name, start_s, duration_s) op")
    names = sorted({name for _, _, name, _, _ in ops} | {f"{module}(1)"})
    meta_id = {name: i for i, name in enumerate(names, start=1)}
    metadata = " ".join(f'event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for n, i in meta_id.items())

    def event(name: str, start_s: float, duration_s: float) -> str:
        if duration_s < 0 or start_s < 0:
            raise ValueError(f"op {name!r} has start {start_s} s and duration {duration_s} s; both must be >= 0")
        return (f"events {{ metadata_id: {meta_id[name]} offset_ps: {round(start_s * 1e12)} "
                f"duration_ps: {round(duration_s * 1e12)} }}")

    planes = []
    for device in sorted({d for d, *_ in ops}):
        mine = sorted((o for o in ops if o[0] == device), key=lambda o: o[3])
        runs = []
        for step in sorted({o[1] for o in mine}):
            of_step = [o for o in mine if o[1] == step]
            start, end = min(o[3] for o in of_step), max(o[3] + o[4] for o in of_step)
            runs.append(event(f"{module}(1)", start, end - start))
        op_events = " ".join(event(name, start, dur) for _, _, name, start, dur in mine)
        planes.append(f'planes {{ id: {device + 1} name: "/device:{platform}:{device}" '
                      f'lines {{ id: 1 name: "XLA Modules" timestamp_ns: 0 {" ".join(runs)} }} '
                      f'lines {{ id: 2 name: "XLA Ops" timestamp_ns: 0 {op_events} }} {metadata} }}')
    return ProfileData.text_proto_to_serialized_xspace(" ".join(planes))
