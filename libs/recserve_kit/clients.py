"""The one way the stack makes a client of another of its services.

A ``Client`` calls one service's unary methods. The methods named when it
is made (the request path's) go through ``calls``: as frames on held
streams (``CallStream``) or straight to the service's handlers in this very
process (``LocalCalls``); every other method is the generated stub's own
unary gRPC call on the channel. The generated stub stays as generated: a
client carries the methods it names, and says which (``carried``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import grpc
from google.protobuf import descriptor_pool, message_factory


class UnaryCalls(Protocol):
    """What carries a client's named methods (``CallStream``, ``LocalCalls``)."""

    def unary(self, method: str, response_class: Any) -> Callable[..., Awaitable[Any]]: ...


class Client:
    """``service``'s methods: ``methods`` through ``calls`` (none: every
    method unary), the others through ``stub``. Each is called as the
    generated stub's would be: (request, timeout=, metadata=), raising
    ``grpc.aio.AioRpcError``."""

    def __init__(
        self,
        stub: Any,
        service: str,
        calls: UnaryCalls | None = None,
        methods: Iterable[str] = (),
    ) -> None:
        self.stub = stub
        self.service = service
        self.carried: dict[str, Callable[..., Awaitable[Any]]] = {}
        if calls is None:
            return
        descriptor = descriptor_pool.Default().FindServiceByName(service)
        for name in methods:
            method = descriptor.methods_by_name[name]
            if method.client_streaming or method.server_streaming:
                raise ValueError(f"{service}/{name} streams: only unary methods are carried")
            response_class = message_factory.GetMessageClass(method.output_type)
            self.carried[name] = calls.unary(f"/{service}/{name}", response_class)
        # Found by plain attribute lookup on every call, as a stub's are.
        self.__dict__.update(self.carried)

    def __getattr__(self, name: str) -> Any:
        # Reached only for names the instance lacks: the stub's unary methods.
        return getattr(self.__dict__["stub"], name)


def client(
    stub_class: Callable[[grpc.aio.Channel], Any],
    channel: grpc.aio.Channel,
    service: str,
    calls: UnaryCalls | None = None,
    methods: Iterable[str] = (),
) -> Client:
    """A ``Client`` of ``service`` on ``channel`` (``stub_class``: its generated stub)."""
    return Client(stub_class(channel), service, calls, methods)
