"""The wire schema both sides import: msgspec Structs for every request and result."""

__version__ = "0.2.0"
"""Of both distributions, wasm-runner and wasm-runner-client: their pyproject files read it from here."""

__all__ = ["execution", "wire"]
