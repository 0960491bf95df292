// Retries and per-attempt timeouts of the read calls, as an interceptor.
// Connect has no gRPC service config, so the policy the Python client gets
// from its channel's service config is carried out here with the same
// rules: only the idempotent reads, only retryable codes, within the call's
// one deadline, and a token bucket that stops retries while calls keep
// failing.
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { statusName } from "./errors.js";
import { READ_METHODS, type Reconnect, type RetryPolicy } from "./options.js";

export const SERVICE = "recserve.recommend.v1.RecommendService";
const UNIT_MS: Record<string, number> = { H: 3.6e6, M: 6e4, S: 1e3, m: 1, u: 1e-3, n: 1e-6 };

/** gRPC's retry throttling: retries only while more than half the tokens are left. */
class Throttle {
  private tokens: number;
  constructor(
    private readonly max: number,
    private readonly ratio: number,
  ) {
    this.tokens = max;
  }
  failure(): void {
    this.tokens = Math.max(0, this.tokens - 1);
  }
  success(): void {
    this.tokens = Math.min(this.max, this.tokens + this.ratio);
  }
  allows(): boolean {
    return this.tokens > this.max / 2;
  }
}

function deadlineOf(header: Headers): number {
  const match = /^(\d{1,8})([HMSmun])$/.exec(header.get("grpc-timeout") ?? "");
  return match ? Date.now() + Number(match[1]) * UNIT_MS[match[2]] : Number.POSITIVE_INFINITY;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/** No connection: refused, or reset under the call (nothing or a read lost). */
function connectionLost(error: unknown): boolean {
  const cause = ConnectError.from(error).cause as { code?: unknown } | undefined;
  const code = typeof cause?.code === "string" ? cause.code : "";
  const lost = ["ECONNREFUSED", "ECONNRESET"].includes(code);
  return lost || /\bECONN(REFUSED|RESET)\b/.test(String(error));
}

// A policy with no retries: what `retry: null` asks for, where reads still
// wait for a connection.
const ONCE: RetryPolicy = {
  maxAttempts: 1,
  attemptTimeoutMs: null,
  initialBackoffMs: 0,
  maxBackoffMs: 0,
  backoffMultiplier: 1,
  retryableCodes: [],
  throttleMaxTokens: 1,
  throttleTokenRatio: 1,
};

export function retryInterceptor(
  given: RetryPolicy | null,
  reconnect: Reconnect | null,
  onAttempt?: (method: string, attempt: number) => void,
): Interceptor {
  const policy = given ?? ONCE;
  const throttle = new Throttle(policy.throttleMaxTokens, policy.throttleTokenRatio);
  const reads: readonly string[] = READ_METHODS;
  return (next) => async (req) => {
    const method = req.method.name;
    if (req.stream || req.service.typeName !== SERVICE || !reads.includes(method)) {
      onAttempt?.(method, 1);
      return next(req);
    }
    const deadline = deadlineOf(req.header);
    let backoff = policy.initialBackoffMs;
    let reconnectMs = reconnect?.backoffMs ?? 0;
    for (let attempt = 1; ; attempt++) {
      onAttempt?.(method, attempt);
      const last = attempt >= policy.maxAttempts;
      const abandon = new AbortController();
      let abandoned = false;
      // The last attempt, and any while retries are throttled, runs to the
      // call's deadline: abandoning it could only fail the call early.
      const timer =
        policy.attemptTimeoutMs === null || last || !throttle.allows()
          ? undefined
          : setTimeout(() => {
              abandoned = true;
              abandon.abort(new ConnectError("attempt timed out", Code.DeadlineExceeded));
            }, policy.attemptTimeoutMs);
      const header = new Headers(req.header);
      if (Number.isFinite(deadline)) {
        header.set("grpc-timeout", `${Math.max(1, Math.ceil(deadline - Date.now()))}m`);
      }
      try {
        const response = await next({
          ...req,
          header,
          signal: AbortSignal.any([req.signal, abandon.signal]),
        });
        throttle.success();
        return response;
      } catch (error) {
        // A stream the transport closed, cancelled by neither the caller nor
        // the attempt timeout: its connection closed under it.
        const failed = ConnectError.from(error);
        const closed = failed.code === Code.Canceled && /stream closed/.test(failed.rawMessage);
        const lost = connectionLost(error) || closed;
        if (reconnect && !req.signal.aborted && !abandoned && lost) {
          // gRPC's wait-for-ready: not an attempt, nothing for the throttle.
          const pause = reconnectMs * (0.8 + 0.4 * Math.random());
          // The next try would come after the deadline: say why there was none.
          if (Date.now() + pause >= deadline) throw unreachable(req.url, error);
          await sleep(pause, req.signal);
          reconnectMs = Math.min(reconnectMs * 1.6, reconnect.maxBackoffMs);
          attempt--;
          continue;
        }
        const code = statusName(ConnectError.from(error).code);
        if (req.signal.aborted || !(abandoned || policy.retryableCodes.includes(code))) {
          throw error;
        }
        throttle.failure();
        const wait = Math.random() * backoff;
        if (last || !throttle.allows() || Date.now() + wait >= deadline) throw error;
        await sleep(wait, req.signal);
        backoff = Math.min(backoff * policy.backoffMultiplier, policy.maxBackoffMs);
      } finally {
        clearTimeout(timer);
      }
    }
  };
}

function unreachable(url: string, error: unknown): ConnectError {
  const host = new URL(url).host;
  return new ConnectError(
    `no connection to ${host} within the call's deadline (${ConnectError.from(error).rawMessage}): ` +
      "check the address, and TLS on or off as the server has it",
    Code.Unavailable,
  );
}

