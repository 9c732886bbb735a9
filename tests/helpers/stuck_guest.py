"""A guest program that blocks inside a host call past any deadline."""

REAL_SLEEP = """
import time
print("before the sleep", flush=True)
real = [c.cell_contents for c in time.sleep.__func__.__closure__
        if getattr(c.cell_contents, "__name__", "") == "sleep"][0]
real(10**6)
"""
"""A guest that reaches the unbounded host sleep kept in the bounded wrapper's closure."""
