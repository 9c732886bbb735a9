"""The wire schema both sides import: msgspec Structs for every request and result."""

__version__ = "0.2.0"
