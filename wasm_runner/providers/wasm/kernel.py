"""What the WebAssembly provider asks of a language runtime and of its instances (kernels).

Every optional capability has a default here, so the provider and the warm pool read
attributes instead of probing for them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from wasm_runner.engine import EngineSettings
from wasm_runner.providers.wasm.sandbox import Call, Outcome, View
from wasm_runner.snapshots.image import ImageRefused, KernelImage, SnapshotRefused
from wasm_runner_protocol.execution import Limits

__all__ = ["Kernel", "Runtime"]


class Kernel(ABC):
    """One live instance of a runtime: a session's kernel, or an instance made ahead."""

    runs_tests: ClassVar[bool] = False
    """It runs a check's tests in the same guest call as the program (else one call each)."""
    warmed: bool = True
    """It made its warm-up call (or needs none)."""
    key: dict[str, Any] = {}
    """What a snapshot of it is valid for (see `snapshots.image.validity_key`)."""
    @property
    def keeps_warmth(self) -> bool:
        """Its resets keep the warmed-up state (then it warms up even while other runs go on)."""
        return False

    @abstractmethod
    def run(self, call: Call) -> Outcome:
        """Run one call to completion in this instance."""

    @abstractmethod
    def accepts(self, limits: Limits) -> bool:
        """Whether a run under `limits` may use this instance (it was made for its engine settings)."""

    @abstractmethod
    def close(self) -> None:
        """Release the instance."""

    def reset(self) -> bool:
        """Bring the instance back to its state when made, for the next one-shot run; False if it
        cannot be reused (then it is closed and replaced)."""
        return False

    def warm(self) -> None:  # noqa: B027 - an optional hook: none by default
        """Make the warm-up call ahead of the first run (sets `warmed`)."""

    def capture(self) -> KernelImage:
        """Its state at rest, as data (SnapshotRefused says why it cannot be taken)."""
        raise SnapshotRefused(f"{type(self).__name__} cannot be snapshotted")

    def checkpoint(self, probe: bool = False) -> KernelImage:
        """`capture` without copying: valid until the next call (it may share the kernel's own
        arrays). `probe`: check every host resource as `capture` does, not only what a call changed."""
        return self.capture()

    def restore(self, image: KernelImage) -> None:
        """Take the state `image` holds (a new instance, before its first call)."""
        raise ImageRefused(f"{type(self).__name__} cannot restore a snapshot")


class Runtime(ABC):
    """A language's guest runtime: prepares its module, runs fresh instances, makes kernels."""

    language: ClassVar[str]
    reuses_instances: ClassVar[bool] = False
    """One-shot runs go to an instance made ahead and reset after (else a fresh one each)."""

    @abstractmethod
    def prepare(self, settings: EngineSettings | None = None) -> object:
        """Build and compile the runtime for these engine settings (once; later calls are cheap)."""

    @abstractmethod
    def fresh(self, view: View, call: Call) -> Outcome:
        """Run one call in a new instance, thrown away after."""

    @abstractmethod
    def new_kernel(self, view: View, limits: Limits, reusable: bool = False, restoring: bool = False) -> Kernel:
        """A live instance for a session (or, `reusable`, for one-shot runs reset between them;
        `restoring`: about to take an image, which an instance made ahead for it may speed up)."""

    def close(self) -> None:  # noqa: B027 - an optional hook: nothing to release by default
        """Release what the runtime keeps made ahead (instances not yet given out)."""

    def restored_kernel(self, view: View, limits: Limits, image: KernelImage) -> Kernel:
        """A session's kernel holding the state `image` was taken of (ImageRefused: it cannot)."""
        kernel = self.new_kernel(view, limits, restoring=True)
        try:
            kernel.restore(image)
        except BaseException:
            kernel.close()
            raise
        return kernel
