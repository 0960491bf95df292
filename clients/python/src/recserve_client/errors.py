"""Errors a call raises: one class per kind of failure a caller handles
differently, each with the status code and the server's message. A bad
request names the field the server refused (``InvalidRequest.field``)."""

from __future__ import annotations

import re

import grpc

_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\[\]\"-]*): (.*)$", re.DOTALL)


class RecserveError(Exception):
    """Any failed call; ``code`` is the gRPC status name ("UNAVAILABLE")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class InvalidRequest(RecserveError):
    """The server refused the request (INVALID_ARGUMENT); never retried.

    ``field`` is the request field it named ("k", "filter.categories",
    "filter.exclude_item_ids[1]", 'attributes.values["region"]'), ``problem``
    what is wrong with it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        match = _FIELD.match(message)
        self.field: str | None = match.group(1) if match else None
        self.problem: str = match.group(2) if match else message


class NotFound(RecserveError):
    """An id that must exist does not (SimilarItems' item_id); never retried."""


class Unavailable(RecserveError):
    """No answer could be had, after the retries the policy allows."""


class DeadlineExceeded(RecserveError):
    """The call's deadline passed before an answer came."""


class RateLimited(RecserveError):
    """The ingress's rate limit refused the call (RESOURCE_EXHAUSTED)."""


class NotAuthorized(RecserveError):
    """UNAUTHENTICATED or PERMISSION_DENIED: a missing or refused token."""


_BY_CODE: dict[grpc.StatusCode, type[RecserveError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimited,
    grpc.StatusCode.UNAUTHENTICATED: NotAuthorized,
    grpc.StatusCode.PERMISSION_DENIED: NotAuthorized,
}


def from_rpc_error(error: grpc.RpcError) -> RecserveError:
    """The exception for a failed call (sync or asyncio)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or ""
    kind = _BY_CODE.get(code, RecserveError)
    return kind(code.name, details)


def call_error(
    error: grpc.RpcError, target: str, timeout_s: float, state: grpc.ChannelConnectivity | None
) -> RecserveError:
    """The exception for a failed call, given the channel's state after it.
    A read waits for a connection within its deadline (``wait_for_ready``):
    where none was made by then, that, not the deadline, is the failure
    (``state`` None: not known, the deadline stands)."""
    code = error.code() if hasattr(error, "code") else None
    if (
        code is grpc.StatusCode.DEADLINE_EXCEEDED
        and state is not None
        and state is not grpc.ChannelConnectivity.READY
    ):
        return Unavailable(
            "UNAVAILABLE",
            f"no connection to {target} within {timeout_s:g} s (the channel is {state.name}): "
            "check the address, and TLS on or off as the server has it",
        )
    return from_rpc_error(error)
