"""A TCP proxy that holds every byte sent upstream for a fixed delay: a slow
network or a slow dependency, injected from the test side. It forwards the
bytes as they are, so mutual TLS and HTTP/2 pass through untouched."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from tests.helpers import free_port_block


class DelayProxy:
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.port = free_port_block(1)
        self.upstream: tuple[str, int] | None = None  # set before the first connection
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", self.port)
        )
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        assert self.upstream is not None, "DelayProxy.upstream is not set"
        upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
        await asyncio.gather(
            self._pipe(client_r, upstream_w, self.delay_s),
            self._pipe(upstream_r, client_w, 0.0),
            return_exceptions=True,
        )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float
    ) -> None:
        """Bytes in order, each chunk ``delay_s`` after it arrived: a latency,
        not a limit on throughput."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - loop.time()))
                writer.write(chunk)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((loop.time() + delay_s, chunk))
        finally:
            queue.put_nowait((0.0, b""))
            await sender
