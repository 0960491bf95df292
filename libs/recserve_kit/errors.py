"""Domain errors and their one mapping to gRPC status codes.

Servicers raise these; the per-method wrapper (``rpc.py``) turns them into statuses.
Anything else becomes INTERNAL with a generic message: exception text never
reaches a client, it goes to the log with the trace id instead.
"""

from __future__ import annotations

import grpc


class RecserveError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(RecserveError):
    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class NotFound(RecserveError):
    code = grpc.StatusCode.NOT_FOUND


class Unavailable(RecserveError):
    code = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(RecserveError):
    code = grpc.StatusCode.UNAUTHENTICATED


class FailedPrecondition(RecserveError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class DeadlineExhausted(RecserveError):
    """The caller's remaining budget cannot cover the next call."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


def status_of(exc: BaseException) -> grpc.StatusCode | None:
    """The status code an outbound call failed with, if it was a gRPC error."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code()
    if isinstance(exc, RecserveError):
        return exc.code
    return None
