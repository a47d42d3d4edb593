"""The exceptions embedrt raises: one class per kind of library error.

Every error is an ``embedrt.Error`` carrying the library's message and ``code`` (the C++
``error_code_name``: "out-of-range", "not-found", ...), and also an instance of the built-in class
a Python program already catches for that kind of failure:

=======================  ======================================  ===============================
class                    codes                                   also a
=======================  ======================================  ===============================
InvalidArgumentError     invalid-argument                        ValueError
OutOfRangeError          out-of-range                            ValueError
NotFoundError            not-found                               FileNotFoundError (OSError)
AlreadyExistsError       already-exists                          FileExistsError (OSError)
NoSpaceError             no-space                                OSError
OperatingSystemError     io                                      OSError
BadFileError             bad-magic, unsupported-version,         OSError
                         malformed, checksum-mismatch
UnsupportedError         unsupported                             NotImplementedError
=======================  ======================================  ===============================

So a wrong id or shape is a ValueError, and a missing, unreadable or damaged file an OSError.
"""
import errno as _errno


class Error(Exception):
    """An embedrt error: the library's message, and where it points.

    Attributes (None where the error does not say):
      code: the library's error code name, e.g. "out-of-range".
      field: the argument at fault, e.g. "ids", "positions", "out", "dtype".
      file, tensor: the file or tensor at fault.
      offset: a byte offset in that file.
      sequence, position: for a request, which token.
    """

    code = "unknown"
    field = None
    file = None
    tensor = None
    offset = None
    sequence = None
    position = None

    def __str__(self):
        return self.args[0] if self.args else ""


class InvalidArgumentError(Error, ValueError):
    """A wrong argument: a shape, a dtype, an option, a non-contiguous or read-only output."""

    code = "invalid-argument"


class OutOfRangeError(Error, ValueError):
    """An id, segment or position past its table; a value past the range of a dtype."""

    code = "out-of-range"


class NotFoundError(Error, FileNotFoundError):
    """A file, or a table or tensor a file should hold, that is not there."""

    code = "not-found"


class AlreadyExistsError(Error, FileExistsError):
    """The output exists and replacing it was not asked for (``force=True``)."""

    code = "already-exists"


class NoSpaceError(Error, OSError):
    """The disk filled up while writing; nothing was left behind."""

    code = "no-space"


class OperatingSystemError(Error, OSError):
    """The operating system refused: open, mmap, mlock, read, write, rename."""

    code = "io"


class BadFileError(Error, OSError):
    """Not an .embt file, a version this build cannot read, a field that breaks the format, or a
    checksum that does not match: the message names the file, field or table."""

    code = "malformed"


class UnsupportedError(Error, NotImplementedError):
    """Valid, but not something this build does (a model family with relative positions, an ISA
    this CPU lacks)."""

    code = "unsupported"


_CLASS_OF_CODE = {
    "invalid-argument": InvalidArgumentError,
    "out-of-range": OutOfRangeError,
    "not-found": NotFoundError,
    "already-exists": AlreadyExistsError,
    "no-space": NoSpaceError,
    "io": OperatingSystemError,
    "bad-magic": BadFileError,
    "unsupported-version": BadFileError,
    "malformed": BadFileError,
    "checksum-mismatch": BadFileError,
    "unsupported": UnsupportedError,
}

_ERRNO_OF_CODE = {"not-found": _errno.ENOENT, "already-exists": _errno.EEXIST, "no-space": _errno.ENOSPC}


def _make(code, message, field, file, tensor, offset, sequence, position):
    """Called by the C++ module to build the exception it raises."""
    error = _CLASS_OF_CODE.get(code, Error)(message)
    error.code = code
    error.field, error.file, error.tensor = field, file, tensor
    error.offset, error.sequence, error.position = offset, sequence, position
    if code in _ERRNO_OF_CODE:
        error.errno = _ERRNO_OF_CODE[code]
    return error
