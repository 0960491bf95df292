"""The blocking client: one channel, safe to share between threads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc

from recserve_client import convert
from recserve_client._proto import events_pb2_grpc, recommend_pb2_grpc
from recserve_client.channel import call_metadata, channel_state, open_channel
from recserve_client.errors import call_error
from recserve_client.options import ClientOptions
from recserve_client.results import Event, ItemFilter, PushResult, Recommendations, UserAttributes

DEFAULT_TARGET = "127.0.0.1:8080"
# PushEvents' deadline when a call names none: Envoy's own for the events
# API. The reply waits for the batch (up to 1,000 events) to be on disk, so
# a write is not held to a read's 1 s.
EVENTS_TIMEOUT_S = 5.0


class RecserveClient:
    """Calls RecommendService and EventService through Envoy.

    Make one per process and keep it: it holds one channel (one HTTP/2
    connection, kept alive), and a client per call would pay a connection
    handshake each time. Reads are retried by the channel's policy
    (``ClientOptions.retry``) within the call's deadline; PushEvents is not
    (``EventBatcher`` retries it)."""

    def __init__(self, target: str = DEFAULT_TARGET, options: ClientOptions | None = None) -> None:
        self.target = target
        self.options = options or ClientOptions()
        self._metadata = call_metadata(target, self.options)
        self._channel = open_channel(target, self.options)
        self._stub = recommend_pb2_grpc.RecommendServiceStub(self._channel)
        self._events = events_pb2_grpc.EventServiceStub(self._channel)

    @property
    def channel(self) -> grpc.Channel:
        """The shared channel, for stubs of services this client does not wrap yet."""
        return self._channel

    def _invoke(self, method: Any, request: Any, timeout_s: float) -> Any:
        try:
            return method(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as error:
            state = channel_state(self._channel)
            raise call_error(error, self.target, timeout_s, state) from None

    def _call(self, method: Any, request: Any, timeout_s: float | None) -> Recommendations:
        reply = self._invoke(method, request, timeout_s or self.options.timeout_s)
        return convert.recommendations(reply)

    def recommend(
        self,
        user_id: str,
        k: int = 10,
        *,
        categories: Sequence[str] = (),
        exclude_item_ids: Sequence[str] = (),
        item_filter: ItemFilter | None = None,
        attributes: UserAttributes | None = None,
        debug: bool = False,
        request_id: str = "",
        timeout_s: float | None = None,
        model_version: str = "",
        surface: str = "",
    ) -> Recommendations:
        """The top ``k`` items for a user, best first."""
        request = convert.recommend_request(
            user_id,
            k,
            categories=categories,
            exclude_item_ids=exclude_item_ids,
            item_filter=item_filter,
            attributes=attributes,
            debug=debug,
            request_id=request_id,
            model_version=model_version,
            surface=surface,
        )
        return self._call(self._stub.Recommend, request, timeout_s)

    def similar_items(
        self,
        item_id: str,
        k: int = 10,
        *,
        user_id: str = "",
        categories: Sequence[str] = (),
        exclude_item_ids: Sequence[str] = (),
        item_filter: ItemFilter | None = None,
        debug: bool = False,
        request_id: str = "",
        timeout_s: float | None = None,
        surface: str = "",
    ) -> Recommendations:
        """Items similar to ``item_id``; ranked for ``user_id`` when given."""
        request = convert.similar_request(
            item_id,
            k,
            user_id=user_id,
            categories=categories,
            exclude_item_ids=exclude_item_ids,
            item_filter=item_filter,
            debug=debug,
            request_id=request_id,
            surface=surface,
        )
        return self._call(self._stub.SimilarItems, request, timeout_s)

    def push_events(self, events: Iterable[Event], timeout_s: float | None = None) -> PushResult:
        """One PushEvents call: 1 to 1,000 events, kept all or none (a bad one
        raises ``InvalidRequest`` naming it, ``events[N].field``), on disk
        when it returns. Sent once: a failed call may or may not have been
        kept, and sending the same events again is counted once (by their
        ids). Needs an app token (``ClientOptions.token``). An app backend
        sends through an ``EventBatcher`` instead, off its request path."""
        request = convert.events_request(events)
        reply = self._invoke(self._events.PushEvents, request, timeout_s or EVENTS_TIMEOUT_S)
        return convert.push_result(reply)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RecserveClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
