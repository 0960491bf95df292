"""The latency-budget report: where does each request's time go?

Reads OTLP JSON spans (what the services write without a collector,
``<data_dir>/traces/*.jsonl``, or a Tempo's HTTP API), assembles one record
per gateway request (``requests``), picks a run or time window (``window``),
computes the figures (``budget``) and shows them as tables (``rows``),
charts (``charts``) and one HTML page (``page``).
"""

from bench.report.budget import SLO_P99_MS, Budgets, default_budgets
from bench.report.build import Report, Selection, build_report
from bench.report.charts import write_png
from bench.report.page import write_html
from bench.report.spans import Span, spans_from_files, spans_from_tempo, trace_files

__all__ = [
    "SLO_P99_MS",
    "Budgets",
    "Report",
    "Selection",
    "Span",
    "build_report",
    "default_budgets",
    "spans_from_files",
    "spans_from_tempo",
    "trace_files",
    "write_html",
    "write_png",
]
