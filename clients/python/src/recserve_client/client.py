"""The blocking client: one channel, safe to share between threads."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import grpc

from recserve_client import convert
from recserve_client._proto import recommend_pb2_grpc
from recserve_client.channel import call_metadata, open_channel
from recserve_client.errors import from_rpc_error
from recserve_client.options import ClientOptions
from recserve_client.results import ItemFilter, Recommendations, UserAttributes

DEFAULT_TARGET = "127.0.0.1:8080"


class RecserveClient:
    """Calls RecommendService through Envoy.

    Make one per process and keep it: it holds one channel (one HTTP/2
    connection, kept alive), and a client per call would pay a connection
    handshake each time. Reads are retried by the channel's policy
    (``ClientOptions.retry``) within the call's deadline."""

    def __init__(self, target: str = DEFAULT_TARGET, options: ClientOptions | None = None) -> None:
        self.target = target
        self.options = options or ClientOptions()
        self._metadata = call_metadata(target, self.options)
        self._channel = open_channel(target, self.options)
        self._stub = recommend_pb2_grpc.RecommendServiceStub(self._channel)

    @property
    def channel(self) -> grpc.Channel:
        """The shared channel, for stubs of services this client does not wrap yet."""
        return self._channel

    def _call(self, method: Any, request: Any, timeout_s: float | None) -> Recommendations:
        try:
            reply = method(
                request, timeout=timeout_s or self.options.timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
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
