export { EVENTS_TIMEOUT_MS, RecserveClient } from "./client.js";
export type {
  AttributeCondition,
  CallOptions,
  PushOptions,
  RecommendOptions,
  SimilarOptions,
} from "./client.js";
export {
  checkEvent,
  EventBatcher,
  MAX_BATCH,
  newEventId,
  type BatcherOptions,
  type BatcherStats,
} from "./events.js";
export {
  DeadlineExceededError,
  InvalidRequestError,
  NotAuthorizedError,
  NotFoundError,
  RateLimitedError,
  RecserveError,
  UnavailableError,
} from "./errors.js";
export {
  CA_FILE_VARIABLE,
  DEFAULT_RETRY,
  DEFAULT_TARGET,
  DEFAULT_TIMEOUT_MS,
  READ_METHODS,
  transportTls,
  type ClientOptions,
  type RetryPolicy,
  type TlsOptions,
} from "./options.js";
export type {
  Event,
  Explanation,
  Item,
  PushResult,
  Recommendations,
  StageTiming,
  UserAttributes,
} from "./results.js";
