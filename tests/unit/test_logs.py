"""The kit's JSON log lines, and the one grpc record it rewrites."""

import io
import json
import logging
import sys

from recserve_kit.logs import CallerGoneFilter, JsonFormatter


def emitted(record: logging.LogRecord) -> dict:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("ranker"))
    handler.addFilter(CallerGoneFilter())
    handler.handle(record)
    return json.loads(stream.getvalue())


def grpc_record(name: str, level: int, msg: str, args: tuple = ()) -> logging.LogRecord:
    try:
        raise RuntimeError('Failed "execute_batch"')
    except RuntimeError:
        exc_info = sys.exc_info()
    return logging.LogRecord(name, level, "server.pyx.pxi", 710, msg, args, exc_info)


def test_a_reply_to_an_ended_call_is_one_warning_line_without_traceback():
    # As grpc's asyncio server logs it (_LOGGER.exception with the method).
    record = grpc_record(
        "grpc._cython.cygrpc",
        logging.ERROR,
        "ExecuteBatchError raised in core by servicer method [%s]",
        ("/recserve.ranker.v1.RankerService/Score",),
    )
    entry = emitted(record)
    assert entry["level"] == "warning"
    assert entry["msg"] == (
        "reply to /recserve.ranker.v1.RankerService/Score not sent: "
        "the call had ended (cancelled or past its deadline)"
    )
    assert "exc" not in entry
    assert entry["service"] == "ranker" and entry["logger"] == "grpc._cython.cygrpc"


def test_other_grpc_errors_and_other_loggers_keep_their_level_and_traceback():
    other_grpc = grpc_record(
        "grpc._cython.cygrpc",
        logging.ERROR,
        "Unexpected [%s] raised by servicer method [%s]",
        ("KeyError", "/x.Y/Z"),
    )
    entry = emitted(other_grpc)
    assert entry["level"] == "error" and "RuntimeError" in entry["exc"]
    ours = grpc_record(
        "services.ranker", logging.ERROR, "ExecuteBatchError raised in core by servicer method [x]"
    )
    entry = emitted(ours)
    assert entry["level"] == "error" and "exc" in entry
