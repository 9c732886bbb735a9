"""The storage's errors (apart from the S3 client, which only `objects` imports)."""


class StorageError(Exception):
    """The object store failed (unreachable, refused, ...)."""


class AlreadyExists(StorageError):
    """A conditional put found the object already there."""


class ObjectMissing(StorageError):
    """An object that should be there is not."""


class GenerationTaken(StorageError):
    """The generation's manifest exists already: another writer (a newer owner) stored it."""
