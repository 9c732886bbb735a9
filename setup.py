"""The compiled parts, both optional (without a C compiler the package falls back to slower
code): the page copy of memory resets (numpy then, see `memory_reset.copy_pages`) and the
buffer of guest output (a Python callback per write then, see `sandbox.OutputRouter`)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(f"wasm_runner.lowlevel.{name}", [f"wasm_runner/lowlevel/{name}.c"], optional=True)
                   for name in ("_page_copy", "_output_sink", "_held_descriptors")])
