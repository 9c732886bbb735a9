"""The one compiled part: the page copy of memory resets (optional: without a C compiler,
resets fall back to numpy, which is slower; see `memory_reset.copy_pages`)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wasm_runner.providers.wasm._page_copy", ["wasm_runner/providers/wasm/_page_copy.c"],
                             optional=True)])
