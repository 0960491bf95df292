export { RecserveClient } from "./client.js";
export type {
  AttributeCondition,
  CallOptions,
  RecommendOptions,
  SimilarOptions,
} from "./client.js";
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
  DEFAULT_RETRY,
  DEFAULT_TARGET,
  DEFAULT_TIMEOUT_MS,
  READ_METHODS,
  type ClientOptions,
  type RetryPolicy,
  type TlsOptions,
} from "./options.js";
export type {
  Explanation,
  Item,
  Recommendations,
  StageTiming,
  UserAttributes,
} from "./results.js";
