"""This ranker among its replicas: the rollout's writer, or a follower of it.

Every ranker replica serves Score, and routes each user to the arm the one
shared rollout state says (recserve_delivery.replicas). The writer judges
and applies operator actions; a follower reads the state each
``FOLLOW_INTERVAL_S``, loads the candidates it names into its own Triton,
publishes its figures for the writer, and forwards operator actions to the
writer's published address with the caller's token, so any replica can take
them (Envoy and a Service reach any one).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import grpc
from google.protobuf.message import Message

from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_delivery.replicas import ReplicaFigures, WriterLock
from recserve_delivery.rollout import Rollout
from recserve_kit import transport
from recserve_kit.errors import RecserveError, Unavailable
from services.ranker.config import RankerSettings

log = logging.getLogger(__name__)

# A follower's look at the shared state: a rollback reaches it in about this.
FOLLOW_INTERVAL_S = 0.25
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})
FORWARD_TIMEOUT_S = 120.0  # a StartRollout loads the candidate in the writer's Triton


class WriterAnswered(RecserveError):
    """The writer's answer to a forwarded call, passed on as it came."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        super().__init__(error.details() or error.code().name)
        self.code = error.code()


class RolloutReplica:
    def __init__(self, settings: RankerSettings) -> None:
        self.settings = settings
        self.lock = WriterLock(settings.data_dir)
        self.figures = ReplicaFigures(settings.data_dir)
        self._channels: dict[str, tuple[grpc.aio.Channel, ranker_pb2_grpc.RankerServiceStub]] = {}

    def advertise(self, port: int) -> None:
        """Where operator actions reach this replica (published while it
        writes): the setting, else the bound host, else (a wildcard bind, a
        container or pod) the address this host's name resolves to."""
        address = self.settings.advertise_addr
        if not address:
            host = self.settings.host
            if host in WILDCARD_HOSTS:
                host = socket.gethostbyname(socket.gethostname())
            address = f"{host}:{port}"
        self.lock.address = address
        self.lock.publish()

    def claim(self, rollout: Rollout) -> bool:
        """Writer if the lock is free (first start, or the writer died): a
        follower that takes over starts the step's figures over."""
        was_writer = rollout.writer
        rollout.writer = self.lock.try_acquire()
        if rollout.writer and not was_writer:
            self.figures.withdraw()
            log.info("this ranker writes the rollout now", extra={"fields": {}})
            if rollout.state.active:
                rollout.resumed_after_restart()
        return rollout.writer

    def publish_figures(self, rollout: Rollout) -> None:
        if rollout.state.active:
            self.figures.publish(rollout.state.step_started_at, rollout.windows)

    def others(self, rollout: Rollout) -> dict[str, list[dict[str, Any]]]:
        return self.figures.others(rollout.state.step_started_at)

    async def forward(
        self, method: str, request: Message, context: grpc.aio.ServicerContext
    ) -> Any | None:
        """The call made on the writer (its answer), or None: this replica writes."""
        if self.lock.held:
            return None
        address = self.lock.writer_address()
        if not address:
            raise Unavailable("the rollout's writer has not published its address yet; retry")
        stub = self._stub(address)
        token = [(k, v) for k, v in context.invocation_metadata() or () if k == "authorization"]
        try:
            return await getattr(stub, method)(
                request, metadata=token, timeout=context.time_remaining() or FORWARD_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as error:
            raise WriterAnswered(error) from None

    def _stub(self, address: str) -> ranker_pb2_grpc.RankerServiceStub:
        if address not in self._channels:
            # The writer's certificate names "ranker", not the pod IP dialled.
            options = [("grpc.ssl_target_name_override", "ranker")]
            channel = transport.aio_channel(address, self.settings.tls("ranker"), options)
            self._channels[address] = (channel, ranker_pb2_grpc.RankerServiceStub(channel))
        return self._channels[address][1]

    async def close(self) -> None:
        for channel, _ in self._channels.values():
            await channel.close()
        self._channels.clear()
        self.figures.withdraw()
        self.lock.release()
