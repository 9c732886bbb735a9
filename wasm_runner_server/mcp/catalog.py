"""The tools the MCP server lists, with what a model reads of each, and the server's instructions."""

from __future__ import annotations

from wasm_runner_protocol.packages import InstallResult
from wasm_runner_protocol.processes import (
    PreviewLink,
    ProcessInfo,
    ProcessOutput,
    ProcessStdinResult,
)
from wasm_runner_protocol.tools import ToolList
from wasm_runner_protocol.wire import (
    EditResult,
    FileListing,
    GlobResult,
    GrepResult,
    SessionForkResult,
    SessionInfo,
    SessionList,
    WriteResult,
)
from wasm_runner_server.mcp.arguments import (
    EditFileArgs,
    ExecOutput,
    ExecuteCodeArgs,
    GlobArgs,
    GrepArgs,
    InstallPackagesArgs,
    ListFilesArgs,
    PublishArtifactArgs,
    PublishedArtifact,
    ReadFileArgs,
    RunProcessArgs,
    SessionForkArgs,
    SessionListArgs,
    SessionNewArgs,
    SessionResetArgs,
    ToolsApiArgs,
    WriteFileArgs,
)
from wasm_runner_server.mcp.processes import (
    PreviewUrlArgs,
    ProcessOutputArgs,
    SendInputArgs,
    StartProcessArgs,
    StopProcessArgs,
)
from wasm_runner_server.mcp.tools import McpTools, Tool

TIERS = (
    "Which tier for what (`profile` of a call or of session_new): 'python', 'javascript' and 'typescript' run in "
    "WebAssembly, start in milliseconds and suit fast pure code (the standard library, pure-Python packages); "
    "'python-data' is native CPython with pandas, numpy, matplotlib and the data stack (charts come back as "
    "images); 'bash' is a shell with command-line tools (or run_process with a command); 'node' is native "
    "Node.js (npm packages, builds)."
)
LIMITS = (
    "Limits by default: 10 s wall clock (limits.timeout_s, up to the server's maximum), 256 MiB memory (1 GiB "
    "for the native tools), 1 MiB of output per stream, 256 MiB of workspace disk. A result gives at most "
    "{bound} characters of text: longer output comes back as its head and tail with a count of what was cut, "
    "and the full text stays in the workspace (.outputs/), linked; write large output to a file and grep it."
)

INSTRUCTIONS = (
    "A sandbox for running code and working with files. This connection has its own session: files in "
    "its workspace (the current directory, /workspace) and the variables of its Python and JavaScript "
    "kernels persist from one tool call to the next. Code runs in WebAssembly with hard limits on time, "
    "memory, output and disk, and reaches only the network its session's profile allows (none unless the "
    "profile says so; the host makes every connection and checks it); run_process runs native programs "
    "(bubblewrap) where the server has them, under the same network policy. start_process keeps a program "
    "running in the background (a dev server, a long job); process_output reads its output by offset, and "
    "preview_url gives the user a browser link to a port it listens on. Images the code writes (PNG, JPEG, "
    "SVG) are returned as images. Pass `session` to work in another session; session_new, session_list and "
    "session_reset manage them. " + TIERS + " " + LIMITS
)


TOOLS: tuple[Tool, ...] = (
    Tool("sandbox_execute_code", "Execute code",
         "Run code in the session's sandbox, with the network only as the session's "
         "profile allows, none by default: urllib/http.client and fetch go through the host, which checks "
         "each request; `egress` narrows it for this call). Variables persist "
         "between calls (a kernel; the last expression's value is returned); files persist in the workspace, "
         "which is the current directory. Returns stdout, stderr, errors with their line, limits hit, and "
         "images the code wrote (PNG, JPEG, SVG) and figures it showed as image content. `fresh` runs in a new "
         "instance instead of the kernel; harness 'check' runs `code`, then `tests` against it, and gives a verdict; `path` runs "
         "a workspace file instead of `code`. " + TIERS + " " + LIMITS,
         ExecuteCodeArgs, ExecOutput, McpTools.execute_code),
    Tool("run_process", "Run a program",
         "Run a program natively in the session's workspace, sandboxed by bubblewrap, with the network only "
         "as the session's profile allows (none by default; curl, pip and git go through the host's proxy): e.g. "
         "['python3', 'plot.py'], ['sh', '-c', 'ls -la | head'], ['pandoc', 'in.md', '-o', 'out.pdf']. "
         "Use it for command-line tools (pandoc, git, sed, ffmpeg where installed); for pandas/numpy/matplotlib "
         "prefer sandbox_execute_code with profile 'python-data' (a kernel keeps variables). Needs the server's "
         "native provider. Returns output and images written, like sandbox_execute_code. " + LIMITS,
         RunProcessArgs, ExecOutput, McpTools.run_process),
    Tool("start_process", "Start a background process",
         "Start a program that keeps running after this call (a dev server, a watcher, a long job, an "
         "interactive program), natively in the session's sandbox and workspace, confined like run_process: "
         "`command` (e.g. ['python3', '-m', 'http.server', '8000']) or `code` with `language`. Answers its id "
         "at once; its output is kept by the server (the oldest bytes dropped past `output_bytes`) and read with "
         "process_output. It ends with the session, or with stop_process.",
         StartProcessArgs, ProcessInfo, McpTools.start_process),
    Tool("process_output", "Read process output",
         "Read a background process's stdout (or stderr) from a byte offset; the answer ends with the next "
         "offset to read from, so nothing is read twice or missed. `wait_s` waits for new output when there "
         "is none yet. Also says whether the process still runs and its exit code.",
         ProcessOutputArgs, ProcessOutput, McpTools.process_output, read_only=True),
    Tool("send_input", "Send input to a process",
         "Write text to a background process's stdin (a line needs its '\\n'); `eof` closes stdin afterwards.",
         SendInputArgs, ProcessStdinResult, McpTools.send_input),
    Tool("stop_process", "Stop a process",
         "Stop a background process and every process it started (TERM, then KILL after a grace period).",
         StopProcessArgs, ProcessInfo, McpTools.stop_process, destructive=True),
    Tool("preview_url", "Preview link",
         "A link to the server a background process listens with on `port` in the sandbox, for the user to "
         "open in a browser (no key needed) until it expires. Start the server with start_process first: "
         "nothing is started for the link.",
         PreviewUrlArgs, PreviewLink, McpTools.preview_url, read_only=True),
    Tool("read_file", "Read a file",
         "Read a workspace file: text comes back as text, images (PNG, JPEG, SVG, GIF, WebP) as image "
         "content, other bytes as a base64 resource; a file over 1 MiB comes back as a download link instead. "
         "A directory answers its listing.",
         ReadFileArgs, None, McpTools.read_file, read_only=True),
    Tool("write_file", "Write a file",
         "Create or replace a workspace file with text (or bytes in base64, with encoding 'base64'). "
         "Missing parent directories are created unless mkdirs is false. The write is atomic.",
         WriteFileArgs, WriteResult, McpTools.write_file, destructive=True),
    Tool("edit_file", "Edit a file",
         "Edit a text file: exact search-and-replace (old_text must occur exactly once unless replace_all), "
         "several replacements at once in `edits` (all or none), or a unified diff in `patch`.",
         EditFileArgs, EditResult, McpTools.edit_file, destructive=True),
    Tool("publish_artifact", "Publish an artifact",
         "Publish a workspace file (or a folder, as a zip or tar.gz archive) as an immutable artifact: copied to "
         "durable storage that outlives the session, with a note; answers its id, sha256 and a download link "
         "that needs no key. Working files are private until published.",
         PublishArtifactArgs, PublishedArtifact, McpTools.publish_artifact),
    Tool("list_files", "List files",
         "List a workspace directory (the root by default), with sizes; recursive lists everything below.",
         ListFilesArgs, FileListing, McpTools.list_files, read_only=True),
    Tool("glob", "Find files",
         "Find workspace paths matching a glob pattern: * and ? stay within one directory, ** spans any "
         "depth; [abc] and {a,b} work too (e.g. '**/*.py', 'out/*.{png,svg}').",
         GlobArgs, GlobResult, McpTools.glob, read_only=True),
    Tool("grep", "Search file contents",
         "Search workspace files for a regular expression (Python syntax; fixed_string for literal text), "
         "answering path:line: text for each match. `glob` limits the files searched.",
         GrepArgs, GrepResult, McpTools.grep, read_only=True),
    Tool("sandbox_tools_api", "Tools for code",
         "The tools code run with sandbox_execute_code may call in this session (code mode): its profile's MCP "
         "servers' tools, as a Python module (`from sandbox import tools`, then `tools.<name>(...)`) or a "
         "TypeScript declaration (`await tools.<name>({...})`). One program can call many tools, loop and "
         "filter, and return only the answer; each call is decided and recorded by the host.",
         ToolsApiArgs, ToolList, McpTools.tools_api, read_only=True),
    Tool("install_packages", "Install packages",
         "Install pure-Python packages (wheels from the server's package index) into the session, so that "
         "code run in it later can import them, in the kernel and in fresh runs, also after a restart. The "
         "host resolves and downloads them from the server's indexes, within the session's network policy "
         "(the sandbox never connects to the index itself); packages with native code "
         "are refused with a hint to use the native provider (run_process).",
         InstallPackagesArgs, InstallResult, McpTools.install_packages),
    Tool("session_new", "New session",
         "Start a new session (an empty workspace, no kernels) and, unless switch is false, make it this "
         "connection's session. `starter` puts a web project in its workspace with node_modules installed "
         "('vite-react': dev server on port 5173; 'tanstack-start': port 3000): start `npm run dev` with "
         "start_process and give the user preview_url of the port.",
         SessionNewArgs, SessionInfo, McpTools.session_new),
    Tool("session_list", "List sessions",
         "List sessions with their profile and state; the one this connection uses is marked.",
         SessionListArgs, SessionList, McpTools.session_list, read_only=True),
    Tool("session_fork", "Fork session",
         "Copy a session (this connection's by default) into `count` new sessions, each with its files, "
         "installed packages and variables as they are now, to try different approaches from one point; the "
         "copies share nothing writable with it or each other. This connection keeps its session.",
         SessionForkArgs, SessionForkResult, McpTools.session_fork),
    Tool("session_reset", "Reset session",
         "Reset a session (this connection's by default): it starts again under the same id and profile, "
         "with no files and no variables.",
         SessionResetArgs, SessionInfo, McpTools.session_reset, destructive=True),
)
