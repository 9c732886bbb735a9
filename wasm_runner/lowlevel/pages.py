"""Copying pages of memory between numpy arrays of pages, compiled where it was built."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wasm_runner.lowlevel.write_tracking import PAGE

try:
    from wasm_runner.lowlevel._page_copy import copy_pages as compiled_copy_pages
except ImportError:  # built without a C compiler: numpy's copy
    compiled_copy_pages = None

if TYPE_CHECKING:  # numpy is imported where pages are first copied, not by a run that never resets
    import numpy as np


def copy_pages(dst: np.ndarray, dst_pages: np.ndarray, src: np.ndarray, src_pages: np.ndarray) -> None:
    """`dst[dst_pages] = src[src_pages]` for arrays of pages. Compiled, each page is copied once,
    with the GIL released; numpy copies twice (a gather into a temporary, then a scatter), and
    the second copy and its cache misses made a reset about a third slower."""
    import numpy as np

    if compiled_copy_pages is None:
        dst[dst_pages] = src[src_pages]
    else:
        compiled_copy_pages(dst, dst_pages.astype(np.int64, copy=False), src, src_pages.astype(np.int64, copy=False),
                            PAGE)
