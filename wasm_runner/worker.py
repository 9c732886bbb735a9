"""A worker process of a Runner (see `execution.workers`): builds this process's Runner and
serves its parent's orders with it (`execution.worker_main`).

Started as `python -m wasm_runner.worker CONFIG`, CONFIG being JSON with the data directory and
the mounts. Like the CLI it sits on top of the package (it holds a Runner): nothing imports it.
"""

from __future__ import annotations

import json
import sys

from wasm_runner.egress.settings import EgressSettings
from wasm_runner.engine import use_epoch_free_engines
from wasm_runner.execution.kernel_host import WorkerSession
from wasm_runner.execution.scratch import READY_SCRATCH
from wasm_runner.execution.worker_main import reset_signals, serve, take_pipes
from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.runner import Runner
from wasm_runner.session import Session
from wasm_runner.workspace.layout import Workspace


def main() -> None:
    reset_signals()
    config = json.loads(sys.argv[1])
    mounts = tuple(Mount.from_config(m) for m in config["mounts"])
    egress = EgressSettings.from_config(config["egress"]) if config.get("egress") else None
    source, out = take_pipes()
    hosts_kernels = bool(config.get("kernels"))
    concurrency = int(config.get("concurrency", 1))
    packages = PackageSettings.from_config(config["packages"]) if config.get("packages") else None
    if config.get("epoch_free") and not hosts_kernels:
        # Its guests are stopped by ending the process (worker_main's supervisor): no epoch
        # check at every loop back-edge. A session's kernel keeps them (its state would be lost).
        use_epoch_free_engines()
    # This process is the worker: its guests run here, on its threads.
    with Runner(config["data_dir"], isolation="in-process", concurrency=concurrency, mounts=mounts, egress=egress,
                packages=packages, ready_scratch=0 if hosts_kernels else READY_SCRATCH) as runner:

        def open_session(session_id: str, workspace: Workspace, mounts: tuple[Mount, ...], owner: str) -> WorkerSession:
            return Session(runner, session_id, workspace, mounts, owner)

        serve(runner, source, out, open_session if hosts_kernels else None)


if __name__ == "__main__":
    main()
