"""The one door to wasmtime-py's private API and the compiled C extensions (page copy, output sink, held descriptors)."""
