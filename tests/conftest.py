"""Test session set-up: 8 simulated CPU devices before anything starts JAX."""

from scalelib import devices

DEVICE_INFO = devices.setup(8)
