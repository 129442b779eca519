"""Triton's exception classes, and the mapping from the server's error kinds to them."""

from __future__ import annotations

import tessera._tessera as _native


class TritonError(Exception):
    """Base of every error the server answers."""


class UnknownError(TritonError):
    pass


class InternalError(TritonError):
    pass


class NotFoundError(TritonError):
    pass


class InvalidArgumentError(TritonError):
    pass


class UnavailableError(TritonError):
    pass


class UnsupportedError(TritonError):
    pass


class AlreadyExistsError(TritonError):
    pass


for _cls in (
    TritonError,
    UnknownError,
    InternalError,
    NotFoundError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    AlreadyExistsError,
):
    _cls.__module__ = "tritonserver"

# Triton maps CANCELLED (and UNKNOWN) to UnknownError.
_OF_KIND = {
    "Unknown": UnknownError,
    "Internal": InternalError,
    "Not found": NotFoundError,
    "Invalid argument": InvalidArgumentError,
    "Unavailable": UnavailableError,
    "Unsupported": UnsupportedError,
    "Already exists": AlreadyExistsError,
    "Cancelled": UnknownError,
}


def from_native(error: BaseException) -> BaseException:
    """The Triton exception for a `TesseraError(kind, message)`; other exceptions unchanged."""
    if isinstance(error, _native.TesseraError) and len(error.args) == 2:
        kind, message = error.args
        return _OF_KIND.get(kind, UnknownError)(message)
    return error


class translated:
    """`with translated():` re-raises a `TesseraError` as Triton's class."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and isinstance(exc, _native.TesseraError):
            raise from_native(exc) from None
        return False
