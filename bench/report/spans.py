"""Spans as the report reads them, from OTLP JSON files or from Tempo.

OTLP JSON nests spans under their resource (``service.name``,
``service.version``) and scope; a ``Span`` keeps the span's own fields, its
attributes and its resource's attributes flat. Trace and span ids come as
hex (the OTLP/JSON spec) or base64 (protobuf's JSON mapping of bytes, which
the services' file exporter and older Tempo write); both are kept as hex,
the form Tempo and Grafana search by.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def service(self) -> str:
        return str(self.resource.get("service.name", ""))


def hex_id(raw: object, hex_length: int) -> str:
    """An id as lowercase hex, from hex or base64; "" when absent."""
    text = str(raw or "")
    if not text or len(text) == hex_length:
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except (binascii.Error, ValueError):
        return text


def value_of(value: dict[str, Any]) -> Any:
    """An OTLP AnyValue as Python (int64 comes as a string in JSON)."""
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [value_of(v) for v in value["arrayValue"].get("values", [])]
    return None


def attributes_of(entries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {e["key"]: value_of(e.get("value", {})) for e in entries if "key" in e}


def spans_of_export(message: dict[str, Any]) -> Iterator[Span]:
    """The spans of one export request (``resourceSpans``, or Tempo's ``batches``)."""
    for resource in message.get("resourceSpans", []) + message.get("batches", []):
        resource_attributes = attributes_of(resource.get("resource", {}).get("attributes", []))
        scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans", []))
        for scope in scopes:
            for raw in scope.get("spans", []):
                yield Span(
                    trace_id=hex_id(raw.get("traceId"), 32),
                    span_id=hex_id(raw.get("spanId"), 16),
                    parent_id=hex_id(raw.get("parentSpanId"), 16),
                    name=str(raw.get("name", "")),
                    start_ns=int(raw.get("startTimeUnixNano", 0)),
                    end_ns=int(raw.get("endTimeUnixNano", 0)),
                    attributes=attributes_of(raw.get("attributes", [])),
                    resource=resource_attributes,
                )


def trace_files(folder: Path) -> list[Path]:
    """Every span file in a traces folder: ``<service>.jsonl`` and its rotated ``.1``."""
    return sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.1")])


def spans_from_files(paths: Iterable[Path]) -> list[Span]:
    spans: list[Span] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                spans.extend(spans_of_export(json.loads(line)))
    return spans


def spans_from_tempo(base_url: str, limit: int = 500, lookback_s: int = 3600) -> list[Span]:
    """Gateway traces from Tempo's HTTP API (search, then each trace as OTLP JSON)."""
    import time
    import urllib.parse
    import urllib.request

    now = int(time.time())
    query = urllib.parse.urlencode(
        {
            "q": '{ resource.service.name = "gateway" }',
            "limit": limit,
            "start": now - lookback_s,
            "end": now,
        }
    )
    with urllib.request.urlopen(f"{base_url}/api/search?{query}", timeout=30) as response:
        found = json.loads(response.read())
    spans: list[Span] = []
    for entry in found.get("traces", []):
        url = f"{base_url}/api/traces/{entry['traceID']}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            spans.extend(spans_of_export(json.loads(response.read())))
    return spans
