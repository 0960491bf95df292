"""The ranker's wire to Triton.

Inference requests are Triton's own protobuf (``ModelInferRequest``) with
the tensors as raw bytes, sent on one persistent channel: tritonclient's
per-call request builder and result wrapper cost more than the call itself.
They go on held ``ModelStreamInfer`` streams, matched to their answers by
request id (a unary call's stream setup costs about half of a hop's CPU,
docs/benchmarks.md "Held call streams"; Triton's dynamic batcher takes a
stream's requests as any others). Two kinds go as unary calls instead: a
sampled request, whose trace context Triton reads from the call's metadata,
and one the rollout judge times to its end even when nobody waits.
The ``tritonclient.grpc.aio`` client does the control calls (readiness,
loading, the repository index), with the ranker's secret header.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, service_pb2, service_pb2_grpc

from recserve_kit import transport
from recserve_kit.call_stream import StreamCalls
from recserve_kit.errors import FailedPrecondition, Unavailable
from recserve_kit.tracing import is_sampled, outbound_metadata
from services.ranker.config import RankerSettings

log = logging.getLogger(__name__)
BACKSTOP_GRACE_S = 0.25
# Held streams for inferences; more open only while all have calls pending.
# Against a unary call each: 0.5 ms less CPU per Recommend at 50/s
# (docs/benchmarks.md, "The request path's switches, settled").
TRITON_STREAMS = 4
Tensor = tuple[str, np.ndarray]
DATATYPES = {np.dtype(np.int64): "INT64", np.dtype(np.float32): "FP32"}
# Triton takes these pings (its flags: TRITON_KEEPALIVE_FLAGS); the ranker
# starts beside Triton, so both channels reconnect quickly once it listens.
TRITON_CHANNEL = [*transport.CLIENT_KEEPALIVE, *transport.FAST_RECONNECT]
# The control client's own defaults (its channel_args replace them all).
CONTROL_CHANNEL = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    *TRITON_CHANNEL,
]


def infer_request(
    model: str, version: int, inputs: Sequence[Tensor], output: str
) -> service_pb2.ModelInferRequest:
    """Triton's request with every tensor as raw little-endian bytes."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=str(version))
    for name, array in inputs:
        spec = request.inputs.add()
        spec.name = name
        spec.datatype = DATATYPES[array.dtype]
        spec.shape.extend(array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    request.outputs.add().name = output
    return request


def output_array(response: service_pb2.ModelInferResponse) -> np.ndarray:
    """The one FP32 output of a response, as a numpy view of its bytes."""
    shape = tuple(response.outputs[0].shape)
    return np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(shape)


def _unavailable(model: str, exc: grpc.aio.AioRpcError) -> Unavailable:
    """A failed inference call (unary or on the stream) as the ranker's error."""
    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Unavailable("Triton did not answer within the deadline")
    log.warning("Triton %s inference failed: %s", model, exc.details())
    return Unavailable(f"Triton {model} inference failed")


def _consume(call: asyncio.Future[object]) -> None:
    """Reads the outcome of a call nobody may await any more (no warning)."""
    if not call.cancelled():
        call.exception()


class TritonClient:
    def __init__(self, settings: RankerSettings) -> None:
        self.settings = settings
        tls = settings.tls("ranker")
        self.control = triton_aio.InferenceServerClient(
            settings.triton_url,
            creds=tls.channel_credentials() if tls else None,
            channel_args=CONTROL_CHANNEL,
        )
        self.control_headers = transport.triton_control_headers(settings.tls_dir)
        self.channel = transport.aio_channel(
            settings.triton_url,
            tls,
            options=[*TRITON_CHANNEL, ("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        self.infer_stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.stream = StreamCalls(
            self.infer_stub.ModelStreamInfer,
            lambda answer: answer.infer_response.id,
            TRITON_STREAMS,
        )
        self._ids = itertools.count(1)
        self.abandoned_unary = 0  # unary calls still running that nobody waits for

    @property
    def abandoned(self) -> int:
        """Inferences still running in Triton that nobody waits for."""
        return self.abandoned_unary + self.stream.late

    def _late_call_done(self, _: asyncio.Future[object]) -> None:
        self.abandoned_unary -= 1

    async def infer(
        self,
        model: str,
        version: int,
        inputs: list[Tensor],
        output: str,
        timeout_s: float,
        track: Callable[[asyncio.Future[object]], None] | None = None,
    ) -> np.ndarray:
        """One inference; ``track`` sees the call's future (it may outlive us)."""
        if self.abandoned >= self.settings.max_abandoned_calls:
            raise Unavailable("Triton is behind: too many late calls still running")
        request = infer_request(model, version, inputs, output)
        # Triton continues the caller's trace, for sampled requests only (it
        # traces whatever carries a context).
        if track is None and not is_sampled():
            return await self._streamed(model, request, timeout_s)
        return await self._unary(model, request, outbound_metadata(), timeout_s, track)

    async def _streamed(
        self, model: str, request: service_pb2.ModelInferRequest, timeout_s: float
    ) -> np.ndarray:
        request.id = frame_id = str(next(self._ids))
        # Never cancelled either (see _unary): a late answer is read and dropped.
        try:
            answer = await self.stream.held().send(frame_id, request, timeout_s + BACKSTOP_GRACE_S)
        except grpc.aio.AioRpcError as exc:
            raise _unavailable(model, exc) from None
        if answer.error_message:
            log.warning("Triton %s inference failed: %s", model, answer.error_message)
            raise Unavailable(f"Triton {model} inference failed")
        return output_array(answer.infer_response)

    async def _unary(
        self,
        model: str,
        request: service_pb2.ModelInferRequest,
        metadata: tuple[tuple[str, str], ...],
        timeout_s: float,
        track: Callable[[asyncio.Future[object]], None] | None,
    ) -> np.ndarray:
        # The call is never cancelled from here: Triton 2.51's gRPC frontend
        # can crash on a request cancelled while it completes (reproduced
        # under overload; triton-inference-server/server#7368, fixed in
        # 24.12). An answer that comes too late for our caller finishes in
        # the background, unread; past max_abandoned_calls of those, new
        # calls fail at once, so an overloaded Triton's backlog is bounded.
        call = asyncio.ensure_future(
            self.infer_stub.ModelInfer(
                request,
                timeout=self.settings.triton_client_timeout_s,
                metadata=metadata,
            )
        )
        call.add_done_callback(_consume)
        if track is not None:
            track(call)
        try:
            # The caller's deadline cancels this handler (not the shielded
            # call); this wait bounds Triton's share, with room for loop lag,
            # which must not fail a call Triton answered in time.
            result = await asyncio.wait_for(asyncio.shield(call), timeout_s + BACKSTOP_GRACE_S)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            if not call.done():
                self.abandoned_unary += 1
                call.add_done_callback(self._late_call_done)
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise Unavailable("Triton did not answer within the deadline") from None
        except grpc.aio.AioRpcError as exc:
            raise _unavailable(model, exc) from None
        return output_array(result)

    async def ready(self, model: str, number: int) -> bool:
        return bool(await self.control.is_model_ready(model, str(number)))

    async def ensure_loaded(self, model: str, number: int) -> None:
        if await self.ready(model, number):
            return
        # Reloading re-reads the repository: new versions load beside the ones
        # serving, which keep answering (every version on disk is loaded).
        await self.control.load_model(model, headers=self.control_headers)
        if not await self.ready(model, number):
            raise FailedPrecondition(f"{model} version {number} is not loaded")

    async def repository_index(self) -> list[dict[str, Any]]:
        index = await self.control.get_model_repository_index(
            headers=self.control_headers, as_json=True
        )
        return list(index.get("models", []))

    async def close(self) -> None:
        self.stream.close()
        await self.control.close()
        await self.channel.close()
