"""The WebAssembly provider: Python and JavaScript guests in wasmtime."""
