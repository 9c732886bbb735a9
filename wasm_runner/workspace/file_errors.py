"""What a workspace file operation can fail with: one exception each, a stable `code`, a message
that says why and, where there is one, a hint of what to do."""

from __future__ import annotations

from wasm_runner_protocol.errors import ErrorCode, WasmRunnerError


class FileOpError(WasmRunnerError):
    """A file operation that cannot be done; `code` is stable, the message says why."""

    code: ErrorCode = ErrorCode.FILE_ERROR

    def __init__(self, path: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.hint = hint


class InvalidPathError(FileOpError):
    code = ErrorCode.INVALID_PATH


class PathEscapeError(FileOpError):
    """The path leaves the workspace (`..`, an absolute path elsewhere, or a symlink on the way)."""

    code = ErrorCode.PATH_ESCAPE


class NoSuchFileError(FileOpError):
    code = ErrorCode.FILE_NOT_FOUND


class IsDirectoryError(FileOpError):
    code = ErrorCode.IS_A_DIRECTORY


class NotDirectoryError(FileOpError):
    code = ErrorCode.NOT_A_DIRECTORY


class NotRegularFileError(FileOpError):
    code = ErrorCode.NOT_A_REGULAR_FILE


class DirectoryNotEmptyError(FileOpError):
    code = ErrorCode.DIRECTORY_NOT_EMPTY


class FileTooLargeError(FileOpError):
    code = ErrorCode.FILE_TOO_LARGE

    def __init__(self, path: str, limit: int, message: str | None = None, hint: str | None = None) -> None:
        super().__init__(path, message or f"{path or 'the file'} is larger than the {limit}-byte limit", hint)
        self.limit = limit


class NotTextError(FileOpError):
    code = ErrorCode.NOT_TEXT


class EditError(FileOpError):
    code = ErrorCode.EDIT_FAILED


class EditNotFoundError(EditError):
    """The text to replace does not occur in the file."""

    code = ErrorCode.EDIT_NOT_FOUND


class EditNotUniqueError(EditError):
    """The text to replace occurs more than once and replace_all was not asked."""

    code = ErrorCode.EDIT_NOT_UNIQUE

    def __init__(self, path: str, message: str, count: int, lines: list[int], hint: str | None = None) -> None:
        super().__init__(path, message, hint)
        self.count = count
        self.lines = lines


class PatchError(FileOpError):
    """A unified diff that is malformed or whose context is not in the file."""

    code = ErrorCode.PATCH_FAILED


class InvalidPatternError(FileOpError):
    code = ErrorCode.INVALID_PATTERN


class BudgetExceededError(FileOpError):
    """The operation ran past its time budget (the request's share of the file workers)."""

    code = ErrorCode.BUDGET_EXCEEDED


class OperationCancelledError(FileOpError):
    """The operation was stopped because the one who asked for it went away."""

    code = ErrorCode.CANCELLED
