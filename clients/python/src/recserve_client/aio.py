"""The asyncio client: the same calls as RecserveClient, awaited."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc

from recserve_client import convert
from recserve_client._proto import events_pb2_grpc, recommend_pb2_grpc
from recserve_client.channel import call_metadata, open_aio_channel
from recserve_client.client import DEFAULT_TARGET, EVENTS_TIMEOUT_S
from recserve_client.errors import call_error
from recserve_client.options import ClientOptions
from recserve_client.results import Event, ItemFilter, PushResult, Recommendations, UserAttributes


class AsyncRecserveClient:
    """Make it inside the event loop that uses it, one per process; its
    channel belongs to that loop."""

    def __init__(self, target: str = DEFAULT_TARGET, options: ClientOptions | None = None) -> None:
        self.target = target
        self.options = options or ClientOptions()
        self._metadata = call_metadata(target, self.options)
        self._channel = open_aio_channel(target, self.options)
        self._stub = recommend_pb2_grpc.RecommendServiceStub(self._channel)
        self._events = events_pb2_grpc.EventServiceStub(self._channel)

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    async def _invoke(self, method: Any, request: Any, timeout_s: float) -> Any:
        try:
            return await method(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as error:
            state = self._channel.get_state(try_to_connect=False)
            raise call_error(error, self.target, timeout_s, state) from None

    async def _call(self, method: Any, request: Any, timeout_s: float | None) -> Recommendations:
        reply = await self._invoke(method, request, timeout_s or self.options.timeout_s)
        return convert.recommendations(reply)

    async def recommend(
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
        return await self._call(self._stub.Recommend, request, timeout_s)

    async def similar_items(
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
        return await self._call(self._stub.SimilarItems, request, timeout_s)

    async def push_events(
        self, events: Iterable[Event], timeout_s: float | None = None
    ) -> PushResult:
        """One PushEvents call, sent once; see ``RecserveClient.push_events``."""
        request = convert.events_request(events)
        reply = await self._invoke(self._events.PushEvents, request, timeout_s or EVENTS_TIMEOUT_S)
        return convert.push_result(reply)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncRecserveClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
