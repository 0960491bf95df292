"""Unary calls between the stack's services as frames on held streams.

A unary call in grpc.aio opens an HTTP/2 stream, sends and reads metadata
and a status, and wakes grpc's poller thread and the event loop several
times; one call at a time, as the stack sees them, a call that does no work
cost 1.09 ms of server and 0.84 ms of client CPU here, against 0.71 + 0.70
ms as a message on a stream already open (`python -m bench hop --pace-ms
5`; docs/benchmarks.md, "Held call streams and gRPC's own polling"). So a
caller that makes the same calls all day holds a few streams per channel
(``CallStream``) and sends each call as a frame: its id, the method, the
request bytes, the deadline and the metadata. The server (every service the
kit builds, ``CallStreamServicer``) runs the very handler a unary call to
that method would run, with the same wrapper (errors, span, metric, token
checks), and answers with the response bytes or the status, in any order.

To the caller nothing changes: a ``recserve_kit.clients.Client`` carries
a service's named methods on a ``CallStream``, called with the same
arguments as the generated stub's and raising the same
``grpc.aio.AioRpcError`` (DEADLINE_EXCEEDED when the deadline passes,
UNAVAILABLE when the stream breaks; the next call opens a new one).
``StreamCalls`` is the part any held stream can use (Triton's own
``ModelStreamInfer`` in the ranker).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from recserve.calls.v1 import calls_pb2 as cpb
from recserve_kit.rpc import INTERNAL_MESSAGE

log = logging.getLogger(__name__)

SERVICE = "recserve.calls.v1.CallStreamService"
METHOD = f"/{SERVICE}/Calls"
# Streams held per channel at most; more open only while all have calls pending.
STREAMS = 4


# --- server side -----------------------------------------------------------


@dataclass(frozen=True)
class UnaryHandler:
    """A unary method's wrapped behaviour with its parser and serializer."""

    behaviour: Callable[[Any, Any], Awaitable[Any]]
    parse: Callable[[bytes], Any]
    serialize: Callable[[Any], bytes]


class FrameContext:
    """What a handler reads of its ``grpc.aio.ServicerContext``, for a call
    that came as a frame: the metadata, the time left, abort and the code."""

    __slots__ = ("_code", "_deadline", "_details", "_metadata")

    def __init__(self, metadata: Mapping[str, str], timeout_s: float) -> None:
        self._metadata = tuple(metadata.items())
        self._deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code, self._details = code, details
        raise grpc.aio.AbortError()

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def peer(self) -> str:
        return "call-stream"


class CallStreamServicer:
    """Runs each frame of a held stream as the unary call it names."""

    def __init__(self, handlers: Mapping[str, UnaryHandler]) -> None:
        self.handlers = dict(handlers)
        self.closing = False
        self._streams: set[asyncio.Task[Any]] = set()
        self._running: set[asyncio.Task[None]] = set()

    async def Calls(self, frames: Any, context: grpc.aio.ServicerContext) -> None:
        stream = asyncio.current_task()
        assert stream is not None
        self._streams.add(stream)
        lock = asyncio.Lock()
        mine: set[asyncio.Task[None]] = set()
        try:
            async for frame in frames:
                task = asyncio.create_task(self._answer(frame, context, lock))
                for running in (mine, self._running):
                    running.add(task)
                    task.add_done_callback(running.discard)
            if mine:  # the caller is done writing: its answers still go out
                await asyncio.wait(mine)
        finally:
            self._streams.discard(stream)

    async def _answer(self, frame: Any, context: Any, lock: asyncio.Lock) -> None:
        try:
            answer = await self._run(frame)
        except Exception:  # a fault outside the handler's own mapping
            log.exception("call stream frame for %s failed", frame.method)
            answer = cpb.CallsResponse(
                id=frame.id, code=grpc.StatusCode.INTERNAL.value[0], details=INTERNAL_MESSAGE
            )
        try:
            async with lock:
                await context.write(answer)
        except Exception:
            pass  # any failure to write: the stream ended, the caller has failed it already

    async def _run(self, frame: Any) -> cpb.CallsResponse:
        if self.closing:
            return cpb.CallsResponse(
                id=frame.id, code=grpc.StatusCode.UNAVAILABLE.value[0], details="shutting down"
            )
        handler = self.handlers.get(frame.method)
        if handler is None:
            return cpb.CallsResponse(
                id=frame.id,
                code=grpc.StatusCode.UNIMPLEMENTED.value[0],
                details=f"{frame.method}: no such unary method on this server",
            )
        context = FrameContext(frame.metadata, frame.timeout_s)
        try:
            reply = await handler.behaviour(handler.parse(frame.payload), context)
        except grpc.aio.AbortError:
            code = context.code() or grpc.StatusCode.UNKNOWN
            return cpb.CallsResponse(id=frame.id, code=code.value[0], details=context.details())
        return cpb.CallsResponse(id=frame.id, payload=handler.serialize(reply))

    async def close(self, grace_s: float) -> None:
        """Answers what is running (new frames get UNAVAILABLE), then ends
        every stream; callers open a new one for their next call."""
        self.closing = True
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace_s)
        for stream in list(self._streams):
            stream.cancel()


def stream_handler(servicer: CallStreamServicer) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Calls": grpc.stream_stream_rpc_method_handler(
                servicer.Calls,
                request_deserializer=cpb.CallsRequest.FromString,
                response_serializer=cpb.CallsResponse.SerializeToString,
            )
        },
    )


# --- client side -----------------------------------------------------------

_STATUS_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class HeldStream:
    """One open bidirectional stream: frames out through one writer, answers
    in through one reader, each matched to its frame by ``answer_id``."""

    def __init__(self, open_call: Callable[[], Any], answer_id: Callable[[Any], Any]) -> None:
        self.call = open_call()
        self.answer_id = answer_id
        self.pending: dict[Any, asyncio.Future[Any]] = {}
        # Frames whose caller stopped waiting (deadline, cancel): the server
        # still works on them; counted so a caller can bound that backlog.
        self.late: set[Any] = set()
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.broken: grpc.aio.AioRpcError | None = None
        # A caller cancelled in the middle of a write would cancel the whole
        # stream (grpc.aio does so), so one task writes for everybody.
        self.tasks = (asyncio.create_task(self._write()), asyncio.create_task(self._read()))

    async def send(self, frame_id: Any, frame: Any, timeout: float | None) -> Any:
        """The answer to ``frame``, or AioRpcError (DEADLINE_EXCEEDED after
        ``timeout``; the stream's own error when it breaks)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.pending[frame_id] = future
        timer = loop.call_later(timeout, self._expire, frame_id) if timeout is not None else None
        self.outbox.put_nowait(frame)
        try:
            return await future
        finally:
            if self.pending.pop(frame_id, None) is not None and self.broken is None:
                self.late.add(frame_id)  # cancelled while waiting
            if timer is not None:
                timer.cancel()

    def _expire(self, frame_id: Any) -> None:
        future = self.pending.pop(frame_id, None)
        if future is not None and not future.done():
            self.late.add(frame_id)
            future.set_exception(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))

    @property
    def backlog(self) -> int:
        """Frames sent and not answered yet."""
        return len(self.pending)

    async def _write(self) -> None:
        try:
            while True:
                await self.call.write(await self.outbox.get())
        except grpc.aio.AioRpcError as exc:
            self._break(exc)
        except asyncio.InvalidStateError:
            self._break(rpc_error(grpc.StatusCode.UNAVAILABLE, "call stream ended"))

    async def _read(self) -> None:
        try:
            async for answer in self.call:
                frame_id = self.answer_id(answer)
                future = self.pending.pop(frame_id, None)
                if future is None:
                    self.late.discard(frame_id)
                elif not future.done():
                    future.set_result(answer)
            self._break(rpc_error(grpc.StatusCode.UNAVAILABLE, "call stream ended by the server"))
        except grpc.aio.AioRpcError as exc:
            self._break(exc)
        except asyncio.CancelledError:
            self._break(rpc_error(grpc.StatusCode.CANCELLED, "call stream closed"))
            raise

    def _break(self, error: grpc.aio.AioRpcError) -> None:
        if self.broken is None:
            self.broken = error
        for future in self.pending.values():
            if not future.done():
                future.set_exception(self.broken)
        self.pending.clear()
        self.late.clear()
        self.call.cancel()
        for task in self.tasks:  # the writer waits on its outbox for ever otherwise
            if task is not asyncio.current_task():
                task.cancel()

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()


class StreamCalls:
    """Calls on up to ``streams`` held streams of ``open_call``: each call on
    the first one with nothing pending, else on the one with the least
    pending. gRPC reads and writes one message at a time per stream, on
    each side, so under load one stream would queue frames and answers
    behind each other; idle, one stream carries everything. A broken stream
    is replaced on the next call that would use it."""

    def __init__(
        self, open_call: Callable[[], Any], answer_id: Callable[[Any], Any], streams: int = 1
    ) -> None:
        if streams < 1:
            raise ValueError("streams must be at least 1")
        self._open_call = open_call
        self._answer_id = answer_id
        self._held: list[HeldStream | None] = [None] * streams

    def held(self) -> HeldStream:
        best: HeldStream | None = None
        for n, held in enumerate(self._held):
            if held is None or held.broken is not None:
                held = self._held[n] = HeldStream(self._open_call, self._answer_id)
            if held.backlog == 0:
                return held
            if best is None or held.backlog < best.backlog:
                best = held
        assert best is not None
        return best

    @property
    def late(self) -> int:
        """Frames still running that nobody waits for."""
        return sum(len(held.late) for held in self._held if held is not None)

    def close(self) -> None:
        for n, held in enumerate(self._held):
            if held is not None:
                held.close()
                self._held[n] = None


class CallStream:
    """Unary calls of the kit's services multiplexed on up to ``streams``
    held streams of ``channel`` (their ``CallStreamService``)."""

    def __init__(self, channel: grpc.aio.Channel, streams: int = STREAMS) -> None:
        open_call = channel.stream_stream(
            METHOD,
            request_serializer=cpb.CallsRequest.SerializeToString,
            response_deserializer=cpb.CallsResponse.FromString,
        )
        self.calls = StreamCalls(open_call, lambda answer: answer.id, streams)
        self._ids = itertools.count(1)

    def unary(self, method: str, response_class: Any) -> Callable[..., Awaitable[Any]]:
        """A callable like a stub's ``method``: (request, timeout=, metadata=)."""
        parse = response_class.FromString

        async def call(
            request: Any, timeout: float | None = None, metadata: Iterable[tuple[str, str]] = ()
        ) -> Any:
            answer = await self.call(method, request.SerializeToString(), timeout, metadata)
            if answer.code:
                code = _STATUS_BY_VALUE.get(answer.code, grpc.StatusCode.UNKNOWN)
                raise rpc_error(code, answer.details)
            return parse(answer.payload)

        return call

    async def call(
        self,
        method: str,
        payload: bytes,
        timeout: float | None,
        metadata: Iterable[tuple[str, str]],
    ) -> Any:
        frame_id = next(self._ids)
        frame = cpb.CallsRequest(
            id=frame_id,
            method=method,
            payload=payload,
            timeout_s=timeout or 0.0,
            metadata=dict(metadata),
        )
        return await self.calls.held().send(frame_id, frame, timeout)

    def close(self) -> None:
        self.calls.close()
