"""scalelib.serving.request: requests and sampling parameters are checked when they are made."""

import pytest

from scalelib.serving import request


def test_request_normalizes_and_keeps_its_fields():
    r = request.request([3, 1, 2], 5, stop=[7], temperature=0.5, top_k=4, top_p=0.9, seed=11)
    assert r.prompt == (3, 1, 2) and r.stop == (7,) and r.max_tokens == 5
    assert r.sampling == request.SamplingParams(0.5, 4, 0.9, 11) and not r.sampling.greedy
    assert request.request(range(3), 1).sampling.greedy
    assert request.SAMPLING_OPTIONS == ("temperature", "top_k", "top_p", "seed")


@pytest.mark.parametrize("kwargs, message", [
    ({"temprature": 1.0}, r"unknown sampling option\(s\) \['temprature'\]; the options are"),
    ({"top_n": 3, "beam": 2}, r"\['beam', 'top_n'\]"),
    ({"temperature": -0.1}, "temperature must be a finite number >= 0"),
    ({"temperature": float("inf")}, "temperature must be a finite number"),
    ({"top_k": -1}, "top_k must be an int >= 0"),
    ({"top_k": 2.0}, "top_k must be an int"),
    ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\]"),
    ({"top_p": 1.5}, "top_p must be a number in"),
    ({"seed": -1}, "seed must be an int in"),
    ({"seed": 2**31}, "seed must be an int in"),
    ({"seed": True}, "seed must be an int in"),
])
def test_bad_sampling_options_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        request.request([1], 2, **kwargs)


@pytest.mark.parametrize("args, message", [
    (([], 3), "prompt must be a non-empty sequence of token ids"),
    (([1, -2], 3), "prompt must be a non-empty sequence of token ids"),
    (([1, 2.0], 3), "prompt must be a non-empty sequence"),
    (([1], 0), r"max_tokens \(the most new tokens to generate\) must be a positive int"),
    (([1], -4), r"max_tokens \(the most new tokens to generate\) must be a positive int"),
    (([1], 2.5), r"max_tokens \(the most new tokens to generate\) must be a positive int"),
])
def test_bad_requests_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        request.request(*args)


def test_stop_tokens_and_sampling_type_are_checked():
    with pytest.raises(ValueError, match="stop must be token ids"):
        request.request([1], 2, stop=[-1])
    with pytest.raises(TypeError, match="sampling must be a SamplingParams"):
        request.Request((1,), 2, {"temperature": 1.0})
