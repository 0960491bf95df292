"""Our own span and metric attribute names, in one place (prefix ``recserve.``).

Standard ones (rpc.*, server.*) come from OpenTelemetry's gRPC
instrumentation and semantic conventions; these are only what is ours.
"""

STAGE = "recserve.stage"
USER_FOUND = "recserve.user.found"
CANDIDATES = "recserve.candidates.count"
RESULTS = "recserve.results.count"
DEGRADED = "recserve.degraded"
DEGRADED_REASON = "recserve.degraded.reason"
MODEL_VERSION = "recserve.model.version"
CACHE_HITS = "recserve.cache.hits"
BUDGET_REMAINING_MS = "recserve.budget.remaining_ms"
IN_FLIGHT = "recserve.in_flight"
# Milliseconds between Envoy taking a request (x-request-start) and the gateway starting it.
QUEUED_MS = "recserve.queued_ms"

ALL = (
    STAGE,
    USER_FOUND,
    CANDIDATES,
    RESULTS,
    DEGRADED,
    DEGRADED_REASON,
    MODEL_VERSION,
    CACHE_HITS,
    BUDGET_REMAINING_MS,
    IN_FLIGHT,
    QUEUED_MS,
)
