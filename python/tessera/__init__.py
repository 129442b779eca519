"""Tessera embedded in Python.

`tessera.pytriton` is PyTriton's API over Tessera's server running inside this process: existing
PyTriton code changes only its imports (`from tessera.pytriton.triton import Triton, TritonConfig`).
The native half (`tessera._tessera`) is the Rust server library, built by maturin.
"""

from tessera._tessera import Server  # noqa: F401

__all__ = ["Server"]
