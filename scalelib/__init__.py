"""scalelib: the library behind the course on "How to Scale Your Model".

Importing scalelib does not start JAX: ``scalelib.devices.setup(8)`` can still choose the
number of simulated devices afterwards. Import the modules you need, e.g.
``from scalelib import hardware, roofline``.
"""

__version__ = "0.1.0"
