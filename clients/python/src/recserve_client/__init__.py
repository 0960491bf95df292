"""Client for recserve's RecommendService (Recommend, SimilarItems) and
EventService (PushEvents, and EventBatcher to send events in the background).

from recserve_client import RecserveClient

with RecserveClient("127.0.0.1:8080") as client:
    answer = client.recommend("42", k=10)
"""

from recserve_client.aio import AsyncRecserveClient
from recserve_client.channel import VERSION as __version__
from recserve_client.client import DEFAULT_TARGET, RecserveClient
from recserve_client.errors import (
    DeadlineExceeded,
    InvalidRequest,
    NotAuthorized,
    NotFound,
    RateLimited,
    RecserveError,
    Unavailable,
)
from recserve_client.events import BatcherStats, EventBatcher, new_event_id
from recserve_client.options import READ_METHODS, ClientOptions, RetryPolicy, TlsOptions
from recserve_client.results import (
    AttributeCondition,
    Event,
    Explanation,
    Item,
    ItemFilter,
    PushResult,
    Recommendations,
    StageTiming,
    UserAttributes,
)

__all__ = [
    "DEFAULT_TARGET",
    "READ_METHODS",
    "AsyncRecserveClient",
    "AttributeCondition",
    "BatcherStats",
    "ClientOptions",
    "DeadlineExceeded",
    "Event",
    "EventBatcher",
    "Explanation",
    "InvalidRequest",
    "Item",
    "ItemFilter",
    "NotAuthorized",
    "NotFound",
    "PushResult",
    "RateLimited",
    "Recommendations",
    "RecserveClient",
    "RecserveError",
    "RetryPolicy",
    "StageTiming",
    "TlsOptions",
    "Unavailable",
    "UserAttributes",
    "__version__",
    "new_event_id",
]
