"""JSON-lines logging on stdout, stamped with the current trace and span ids."""

from __future__ import annotations

import json
import logging
import sys
import time

from opentelemetry import trace


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry["trace_id"] = f"{span_context.trace_id:032x}"
            entry["span_id"] = f"{span_context.span_id:016x}"
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            entry.update(extra)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class CallerGoneFilter(logging.Filter):
    """grpc's asyncio server logs an ERROR with a traceback when a reply
    cannot be sent because the call has already ended: the caller cancelled
    it or its deadline passed while the handler ran. Under overload that is
    the expected end of a stage the gateway gave up on (its answer is
    degraded and marked), not a fault of this process: one warning line
    saying so, without the traceback."""

    MARKER = "ExecuteBatchError raised in core by servicer method "

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "grpc._cython.cygrpc" and record.levelno >= logging.ERROR:
            message = record.getMessage()
            if message.startswith(self.MARKER):
                method = message[len(self.MARKER) :].strip("[]")
                record.msg = (
                    "reply to %s not sent: the call had ended (cancelled or past its deadline)"
                )
                record.args = (method,)
                record.levelno, record.levelname = logging.WARNING, "WARNING"
                record.exc_info = record.exc_text = None
        return True


def setup_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(service))
    handler.addFilter(CallerGoneFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
