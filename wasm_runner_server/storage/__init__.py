"""Sessions' files and kernel images beyond the node: local disk (the default) or S3-compatible object storage."""

from wasm_runner_server.storage.sessions import (
    GenerationTaken,
    LocalStorage,
    ObjectStorage,
    SaveStats,
    SessionStorage,
    StorageError,
    open_storage,
)
from wasm_runner_server.storage.settings import StorageSettings

__all__ = ["GenerationTaken", "LocalStorage", "ObjectStorage", "SaveStats", "SessionStorage", "StorageError",
           "StorageSettings", "open_storage"]
