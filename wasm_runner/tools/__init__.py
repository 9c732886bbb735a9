"""Code mode: tools guest code may call, the host deciding every call.

`tool(fn)` makes a tool of a Python callable (its type hints become a JSON schema); a run gets a
`ToolRegistry` narrowed by allowlists and a `ToolPolicy` (budget, timeout, size caps), and its
`ToolRun` answers the guest's calls and records them. `python_stubs`/`typescript_stubs` write the
API a model is shown.
"""

from wasm_runner.tools.calls import ApprovalRefused, ApprovalRequest, Approver, ToolPolicy, ToolRun
from wasm_runner.tools.registry import (
                                       Tool,
                                       ToolRegistry,
                                       as_registry,
                                       camel_name,
                                       from_spec,
                                       marked_for_approval,
                                       needing_approval,
                                       tool,
)
from wasm_runner.tools.stubs import python_stubs, typescript_stubs

__all__ = ["ApprovalRefused", "ApprovalRequest", "Approver", "Tool", "ToolPolicy", "ToolRegistry", "ToolRun",
           "as_registry", "camel_name", "from_spec", "marked_for_approval", "needing_approval", "python_stubs", "tool",
           "typescript_stubs"]
