// What a client is configured with; the defaults match the Python client's
// (docs/clients.md says why).
import { readFileSync } from "node:fs";

/** The idempotent reads: the only methods the retry policy applies to. */
export const READ_METHODS = ["Recommend", "SimilarItems"] as const;

/** gRPC status names a policy may never retry: a refused request stays refused. */
export const NEVER_RETRIED: ReadonlySet<string> = new Set([
  "INVALID_ARGUMENT",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "PERMISSION_DENIED",
  "UNAUTHENTICATED",
  "FAILED_PRECONDITION",
  "OUT_OF_RANGE",
  "UNIMPLEMENTED",
  "DEADLINE_EXCEEDED",
]);

export interface RetryPolicy {
  /** Attempts in all, the first included (2 to 5). */
  maxAttempts: number;
  /** An attempt not answered by then is abandoned and sent again; null: off. */
  attemptTimeoutMs: number | null;
  initialBackoffMs: number;
  maxBackoffMs: number;
  backoffMultiplier: number;
  /** gRPC status names ("UNAVAILABLE") retried after a failed attempt. */
  retryableCodes: string[];
  /** Retries stop while more than half of these tokens are spent. */
  throttleMaxTokens: number;
  throttleTokenRatio: number;
}

export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 3,
  attemptTimeoutMs: 300,
  initialBackoffMs: 20,
  maxBackoffMs: 200,
  backoffMultiplier: 2,
  retryableCodes: ["UNAVAILABLE"],
  throttleMaxTokens: 100,
  throttleTokenRatio: 1,
});

export interface TlsOptions {
  /** PEM of the CA to trust; Node's bundled CAs when absent (RECSERVE_CA_FILE's by default). */
  ca?: string | Buffer;
  /** A client certificate and its key, for mutual TLS. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** The name to expect in the server's certificate. */
  serverName?: string;
}

export interface ClientOptions {
  /** host:port of Envoy's public listener. */
  target?: string;
  /** The whole call's deadline, retries included. */
  timeoutMs?: number;
  /** null: no retries at all. */
  retry?: Partial<RetryPolicy> | null;
  /**
   * Absent: TLS to any address but loopback (which gets plaintext), trusting
   * the CA in RECSERVE_CA_FILE, else Node's; given: TLS with these, loopback included.
   */
  tls?: TlsOptions;
  /** Sent as `authorization: Bearer <token>`; only over TLS or to loopback. */
  token?: string;
  /** No TLS even off loopback (a sidecar or tunnel does it); a token is then refused there. */
  plaintext?: boolean;
  keepaliveIntervalMs?: number;
  keepaliveTimeoutMs?: number;
  /**
   * A read whose connection is refused or reset waits, within its deadline,
   * for the connection made again (the ingress restarting: Envoy is back in
   * about 0.2 s) instead of failing at once; false: it fails at once.
   */
  waitForReady?: boolean;
  /** The first wait before connecting again, growing 1.6 times to the max. */
  reconnectBackoffMs?: number;
  maxReconnectBackoffMs?: number;
  /** Called for each attempt sent (1 for the first): for metrics and tests. */
  onAttempt?: (method: string, attempt: number) => void;
}

export const DEFAULT_TARGET = "127.0.0.1:8080";
export const DEFAULT_TIMEOUT_MS = 1000;

/** How a read waits for a connection (`waitForReady`); null: it does not. */
export interface Reconnect {
  backoffMs: number;
  maxBackoffMs: number;
}

export function reconnect(options: ClientOptions): Reconnect | null {
  if (options.waitForReady === false) return null;
  const backoffMs = options.reconnectBackoffMs ?? 100;
  const maxBackoffMs = options.maxReconnectBackoffMs ?? 1000;
  if (!(backoffMs > 0 && backoffMs <= maxBackoffMs)) {
    throw new RangeError("reconnectBackoffMs: positive, at most maxReconnectBackoffMs");
  }
  return { backoffMs, maxBackoffMs };
}

export function retryPolicy(given: Partial<RetryPolicy> | null | undefined): RetryPolicy | null {
  if (given === null) return null;
  const policy = { ...DEFAULT_RETRY, ...given };
  if (policy.maxAttempts < 2 || policy.maxAttempts > 5) {
    throw new RangeError("maxAttempts: 2 to 5");
  }
  const refused = policy.retryableCodes.filter((c) => NEVER_RETRIED.has(c));
  if (refused.length) throw new RangeError(`retryableCodes: ${refused} must never be retried`);
  return policy;
}

/** The CA file a client trusts when its options name none. */
export const CA_FILE_VARIABLE = "RECSERVE_CA_FILE";

/** The TLS a connection to `target` uses, undefined for plaintext. */
export function transportTls(target: string, options: ClientOptions): TlsOptions | undefined {
  if (options.tls && options.plaintext) throw new RangeError("plaintext and tls: one or the other");
  if (options.tls) return options.tls;
  if (options.plaintext || isLoopback(target)) return undefined;
  const caFile = process.env[CA_FILE_VARIABLE];
  return caFile ? { ca: readFileSync(caFile) } : {};
}

export function isLoopback(target: string): boolean {
  const host = target.startsWith("[") ? target.slice(1, target.indexOf("]")) : target.split(":")[0];
  return host === "localhost" || host === "::1" || host.startsWith("127.");
}
