// The client: one HTTP/2 connection to Envoy (kept alive with pings),
// gRPC over it through Connect, deadlines and the retry policy on every read;
// PushEvents on the same connection, sent once (EventBatcher retries it).
import { create } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { fromError } from "./errors.js";
import { EventService, PushEventsRequestSchema } from "./gen/recserve/recommend/v1/events_pb.js";
import {
  RecommendRequestSchema,
  RecommendService,
  SimilarItemsRequestSchema,
} from "./gen/recserve/recommend/v1/recommend_pb.js";
import {
  DEFAULT_TARGET,
  DEFAULT_TIMEOUT_MS,
  isLoopback,
  reconnect,
  retryPolicy,
  transportTls,
  type ClientOptions,
} from "./options.js";
import {
  appEvent,
  recommendations,
  type Event,
  type PushResult,
  type Recommendations,
  type UserAttributes,
} from "./results.js";
import { retryInterceptor } from "./retry.js";

/** One condition on a filterable attribute the catalogue declares: `anyOf`
 * for a categorical, tags or boolean one ("true"/"false"), `min`/`max`
 * (inclusive) for a numeric one. */
export interface AttributeCondition {
  name: string;
  anyOf?: string[];
  min?: number;
  max?: number;
}

export interface CallOptions {
  k?: number;
  categories?: string[];
  excludeItemIds?: string[];
  /** Conditions on item attributes; all must hold. */
  attributeFilters?: AttributeCondition[];
  /** Where the list is shown ("home", "cart"), recorded with its impression. */
  surface?: string;
  debug?: boolean;
  requestId?: string;
  /** This call's deadline, retries included (default: the client's). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RecommendOptions extends CallOptions {
  attributes?: UserAttributes;
  /** Rank with this loaded model version (a rollout's stable or candidate),
   * to compare lists side by side; implies `debug`. */
  modelVersion?: string;
}

export interface SimilarOptions extends CallOptions {
  /** Rank the neighbours for this user. */
  userId?: string;
}

/** PushEvents' deadline when a call names none: Envoy's own for the events
 * API. The reply waits for the batch (up to 1,000 events) to be on disk, so a
 * write is not held to a read's 1 s. */
export const EVENTS_TIMEOUT_MS = 5000;

export interface PushOptions {
  /** This call's deadline (default `EVENTS_TIMEOUT_MS`). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export class RecserveClient {
  readonly target: string;
  private readonly session: Http2SessionManager;
  private readonly client: Client<typeof RecommendService>;
  private readonly events: Client<typeof EventService>;
  private readonly timeoutMs: number;

  /** Make one per process and keep it: it holds one connection. */
  constructor(options: ClientOptions = {}) {
    this.target = options.target ?? DEFAULT_TARGET;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const tls = transportTls(this.target, options);
    if (options.token && !tls && !isLoopback(this.target)) {
      throw new RangeError("token: sent only over TLS or to a loopback address");
    }
    const baseUrl = `${tls ? "https" : "http"}://${this.target}`;
    this.session = new Http2SessionManager(
      baseUrl,
      {
        pingIntervalMs: options.keepaliveIntervalMs ?? 30_000,
        pingTimeoutMs: options.keepaliveTimeoutMs ?? 10_000,
        pingIdleConnection: true,
      },
      tls ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.serverName } : {},
    );
    const interceptors: Interceptor[] = [];
    const token = options.token;
    if (token) {
      interceptors.push((next) => (req) => {
        req.header.set("authorization", `Bearer ${token}`);
        return next(req);
      });
    }
    const policy = retryPolicy(options.retry);
    const waits = reconnect(options);
    if (policy || waits) interceptors.push(retryInterceptor(policy, waits, options.onAttempt));
    else if (options.onAttempt) {
      const onAttempt = options.onAttempt;
      interceptors.push((next) => (req) => (onAttempt(req.method.name, 1), next(req)));
    }
    const transport = createGrpcTransport({
      baseUrl,
      sessionManager: this.session,
      interceptors,
    });
    this.client = createClient(RecommendService, transport);
    // The retry interceptor passes it through: it names the reads only.
    this.events = createClient(EventService, transport);
  }

  private call(options: CallOptions) {
    return { timeoutMs: options.timeoutMs ?? this.timeoutMs, signal: options.signal };
  }

  /** The top `k` items for a user, best first. */
  async recommend(userId: string, options: RecommendOptions = {}): Promise<Recommendations> {
    const request = create(RecommendRequestSchema, {
      requestId: options.requestId ?? "",
      userId,
      k: options.k ?? 10,
      filter: itemFilter(options),
      debug: (options.debug ?? false) || Boolean(options.modelVersion),
      modelVersion: options.modelVersion ?? "",
      attributes: options.attributes,
      surface: options.surface ?? "",
    });
    try {
      return recommendations(await this.client.recommend(request, this.call(options)));
    } catch (error) {
      throw fromError(error);
    }
  }

  /** Items similar to `itemId`; ranked for `userId` when given. */
  async similarItems(itemId: string, options: SimilarOptions = {}): Promise<Recommendations> {
    const request = create(SimilarItemsRequestSchema, {
      requestId: options.requestId ?? "",
      itemId,
      k: options.k ?? 10,
      filter: itemFilter(options),
      userId: options.userId ?? "",
      debug: options.debug ?? false,
      surface: options.surface ?? "",
    });
    try {
      return recommendations(await this.client.similarItems(request, this.call(options)));
    } catch (error) {
      throw fromError(error);
    }
  }

  /** One PushEvents call: 1 to 1,000 events, kept all or none (a bad one
   * raises `InvalidRequestError` naming it, `events[N].field`), on disk when
   * it resolves. Sent once: a failed call may or may not have been kept, and
   * sending the same events again is counted once (by their ids). Needs an
   * app token (`ClientOptions.token`). An app backend sends through an
   * `EventBatcher` instead, off its request path. */
  async pushEvents(events: Iterable<Event>, options: PushOptions = {}): Promise<PushResult> {
    const request = create(PushEventsRequestSchema, { events: Array.from(events, appEvent) });
    const call = { timeoutMs: options.timeoutMs ?? EVENTS_TIMEOUT_MS, signal: options.signal };
    try {
      const reply = await this.events.pushEvents(request, call);
      return { accepted: reply.accepted, duplicates: reply.duplicates };
    } catch (error) {
      throw fromError(error);
    }
  }

  /** Closes the connection; calls after it fail. */
  close(): void {
    this.session.abort();
  }
}

function itemFilter(options: CallOptions) {
  return {
    categories: options.categories ?? [],
    excludeItemIds: options.excludeItemIds ?? [],
    attributes: (options.attributeFilters ?? []).map((c) => ({
      name: c.name,
      anyOf: c.anyOf ?? [],
      min: c.min,
      max: c.max,
    })),
  };
}
