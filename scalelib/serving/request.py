"""Requests and their sampling parameters, checked when they are made.

Book: section 7.4 (a server takes a stream of requests; each brings a prompt and wants some new
tokens back) and 7.1 (each new token is picked from the model's distribution over the next one).

A ``Request`` holds the prompt's token ids, the most new tokens it wants, the tokens that end it
early (a stop token is kept as the last output token) and its ``SamplingParams``: greedy (the
argmax, ``temperature = 0``) or sampled at a temperature from the ``top_k`` most likely tokens
and / or the smallest set holding ``top_p`` of the probability, with a seed. The seed and the
position of the token alone decide the random draw (``sampling.token_keys``), so a request's
output does not depend on what it is batched with.

Checks that need the model (token ids below the vocabulary, prompt plus new tokens within the
context) are made by ``engine.Engine.add``; everything else is checked here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scalelib.validate import positive_int

MAX_SEED = 2**31 - 1  # seeds travel to the step as int32


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each new token: ``temperature = 0`` is greedy; ``top_k = 0`` and ``top_p = 1`` filter nothing."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        t, k, p, s = self.temperature, self.top_k, self.top_p, self.seed
        if not (isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < float("inf")):
            raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {t!r}")
        if not (_is_int(k) and k >= 0):
            raise ValueError(f"top_k must be an int >= 0 (0 keeps every token), got {k!r}")
        if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 1):
            raise ValueError(f"top_p must be a number in (0, 1] (1 keeps every token), got {p!r}")
        if not (_is_int(s) and 0 <= s <= MAX_SEED):
            raise ValueError(f"seed must be an int in [0, {MAX_SEED}], got {s!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


SAMPLING_OPTIONS = tuple(f.name for f in dataclasses.fields(SamplingParams))


def sampling_params(**options: Any) -> SamplingParams:
    """``SamplingParams`` from keyword options, naming any option it does not know."""
    unknown = sorted(set(options) - set(SAMPLING_OPTIONS))
    if unknown:
        raise ValueError(f"unknown sampling option(s) {unknown}; the options are {list(SAMPLING_OPTIONS)}")
    return SamplingParams(**options)


@dataclass(frozen=True)
class Request:
    """A prompt and what to do with it. ``prompt`` and ``stop`` are token ids."""

    prompt: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        prompt, stop = tuple(self.prompt), tuple(self.stop)
        if not prompt or not all(_is_int(t) and t >= 0 for t in prompt):
            raise ValueError(f"prompt must be a non-empty sequence of token ids (ints >= 0), got {self.prompt!r:.80}")
        if not all(_is_int(t) and t >= 0 for t in stop):
            raise ValueError(f"stop must be token ids (ints >= 0), got {self.stop!r:.80}")
        positive_int("max_tokens (the most new tokens to generate)", self.max_tokens)
        if not isinstance(self.sampling, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams (see sampling_params(**options)), got "
                            f"{type(self.sampling).__name__}")
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "stop", stop)


def request(prompt: Iterable[int], max_tokens: int, *, stop: Iterable[int] = (), **sampling: float) -> Request:
    """A ``Request`` with its sampling options given by name (unknown names are an error)."""
    return Request(tuple(prompt), max_tokens, sampling_params(**sampling), tuple(stop))
