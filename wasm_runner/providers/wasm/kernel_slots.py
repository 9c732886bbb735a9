"""A session's kernel of one language across its calls: made, restored, checkpointed, rolled back.

Before each call the kernel's state is checkpointed (the pages the last call wrote, copied: see
`LinearMemory.checkpoint`); a call that hits a limit or traps is then rolled back: a new instance
takes the checkpoint, and the next call finds the variables defined before the failed one (files
the failed call wrote stay: they are the workspace's). Where there is no kernel (the first call,
after hibernation, a restart or a worker lost), a saved image (`KernelImages`) is restored if
there is one that checks out; otherwise a new kernel starts, and the result says why
(`restart_reason`). A kernel this process dropped for a reason (a failed call it could not roll
back) does not come back from an older image: its saved image is discarded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from wasm_runner.providers.wasm.kernel import Kernel, Runtime
from wasm_runner.providers.wasm.sandbox import Outcome, View
from wasm_runner.snapshots.image import ImageRefused, KernelImage, SnapshotRefused
from wasm_runner.snapshots.store import KernelImages
from wasm_runner_protocol.execution import Limits

__all__ = ["KernelSlot", "Opened"]

log = logging.getLogger("wasm_runner")


@dataclass
class KernelSlot:
    """A session's kernel for one language; `lost` remembers that state was dropped, `reason` why."""

    saves_state: ClassVar[bool] = True
    """Its kernel's state can be saved (a snapshot); a native kernel's cannot."""
    kernel: Kernel | None = None
    lost: bool = False
    reason: str | None = None
    checkpoint: KernelImage | None = None
    """The kernel's state before the call running now (None: it could not be taken)."""
    no_checkpoint: str | None = None
    """Why there is none."""
    checkpoint_current: bool = False
    """The checkpoint was taken after the last call (ahead of the next): nothing ran since."""

    def drop(self, reason: str) -> None:
        """Close the kernel (if any) and remember that its state is gone, and why."""
        if self.kernel is not None:
            self.kernel.close()
        self.kernel, self.lost, self.reason, self.checkpoint = None, True, reason, None
        self.checkpoint_current = False

    def open(self, runtime: Runtime, view: View, limits: Limits, images: KernelImages | None) -> Opened:
        """Make sure the slot holds a kernel that takes `limits`, restoring a saved image where
        there is one. Says whether earlier state is gone and why."""
        kernel = self.kernel
        if kernel is not None and kernel.accepts(limits):
            return Opened()
        if kernel is not None:
            self.drop("the call's limits need another engine (fuel counting on or off), and a kernel "
                      "keeps the engine it started with")
        restoring = images is not None and not self.lost and images.has(runtime.language)
        kernel = runtime.new_kernel(view, limits, restoring=restoring)
        refused = None
        if images is not None and self.lost:  # dropped here, for a reason: an older image is not this state
            images.discard(runtime.language)
        elif restoring:
            assert images is not None
            try:  # onto the new instance before its warm-up: a restore obtains only the handles it needs
                kernel.restore(images.load(runtime.language, kernel.key))
            except FileNotFoundError:
                pass
            except (ImageRefused, SnapshotRefused, OSError) as exc:
                refused = str(exc)
                kernel.close()
                kernel = runtime.new_kernel(view, limits)
            except BaseException:
                kernel.close()
                raise
            else:  # the file stays: should this process die, the next one resumes from it
                self.kernel, self.lost, self.reason = kernel, False, None
                return Opened(restored=True)
        try:
            kernel.warm()
        except Exception:
            kernel.close()
            raise
        self.kernel = kernel
        restarted, reason = self.lost or refused is not None, self.reason
        if restarted and reason is None:
            reason = "the kernel's earlier state was dropped"
        if refused is not None:
            reason = f"the saved kernel state could not be restored: {refused}; a new kernel started (files are kept)"
        self.lost, self.reason = False, None
        return Opened(restarted=restarted, reason=reason)

    def before_call(self) -> None:
        """Checkpoint the kernel, for a rollback should the call fail (unless `ahead` did already)."""
        assert self.kernel is not None
        if self.checkpoint_current:
            self.checkpoint_current = False
            return
        try:
            self.checkpoint, self.no_checkpoint = self.kernel.checkpoint(), None
        except SnapshotRefused as exc:
            self.checkpoint, self.no_checkpoint = None, str(exc)
        except Exception as exc:  # noqa: BLE001 - the call runs without a way back
            log.warning("could not checkpoint a kernel", exc_info=True)
            self.checkpoint, self.no_checkpoint = None, f"the checkpoint failed: {exc}"

    def ahead(self) -> None:
        """Checkpoint now, between calls (off the next call's path: a worker does it once its answer is out)."""
        if self.kernel is not None and not self.checkpoint_current:
            self.before_call()
            self.checkpoint_current = True

    def after_call(self, runtime: Runtime, view: View, limits: Limits, outcome: Outcome) -> bool:
        """After a call: one that hit a limit or lost its instance is rolled back to the checkpoint
        (True), else its kernel is dropped with the reason."""
        if outcome.limit is None and not outcome.instance_lost:
            return False
        what = f"hit its {outcome.limit} limit" if outcome.limit is not None else "crashed the kernel"
        checkpoint = self.checkpoint
        if checkpoint is not None:
            try:
                kernel = runtime.restored_kernel(view, limits, checkpoint)
            except Exception as exc:  # noqa: BLE001 - reported as a restart
                log.warning("could not roll a kernel back", exc_info=True)
                self.no_checkpoint = f"rolling back failed: {exc}"
            else:
                assert self.kernel is not None
                self.kernel.close()
                self.kernel, self.checkpoint, self.checkpoint_current = kernel, None, False
                return True
        if outcome.instance_lost:
            self.drop(f"the previous call {what}, and the kernel could not be rolled back ({self.no_checkpoint})")
        return False


@dataclass(frozen=True)
class Opened:
    """What `KernelSlot.open` did."""

    restarted: bool = False
    """Earlier state is gone (see `reason`)."""
    reason: str | None = None
    restored: bool = False
    """The kernel came back from its saved image (after hibernation or a restart)."""
