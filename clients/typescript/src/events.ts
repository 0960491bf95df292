// EventBatcher: events from an app backend's request handlers, queued and
// sent in batches off the request path, retried when the service could not
// take them. The Python client's EventBatcher (recserve_client/events.py)
// with the same defaults, counts and rules; where Python has a thread and a
// lock, this has one async loop on Node's event loop.
import { randomUUID } from "node:crypto";
import { debuglog } from "node:util";
import { EVENTS_TIMEOUT_MS, type RecserveClient } from "./client.js";
import { InvalidRequestError, RecserveError } from "./errors.js";
import type { Event } from "./results.js";

/** The most one PushEvents call takes. */
export const MAX_BATCH = 1000;
// The service may not have answered, or may have kept the batch and the
// answer was lost (DEADLINE_EXCEEDED): sent again, an event already kept is
// counted as a duplicate, not kept twice. Any other failure stays a failure.
const RETRIED: ReadonlySet<string> = new Set([
  "UNAVAILABLE",
  "RESOURCE_EXHAUSTED",
  "DEADLINE_EXCEEDED",
]);
// The service's id policy (docs/events.md): checked at `add` so that one bad
// id throws in the handler that made it instead of costing a batch a call.
const ID = /^[A-Za-z0-9._:@/-]{1,128}$/;
const REFUSED_EVENT = /^events\[(\d+)\]/;
const debug = debuglog("recserve");

/** A fresh random id (uuid4, hex), for an event that has no id of its own.
 * Prefer one derived from your own record of the event (its click's id):
 * sent again by your own retry, it is then counted once. */
export function newEventId(): string {
  return randomUUID().replaceAll("-", "");
}

/** Throws a RangeError naming the first field the service would refuse for
 * sure; what only the service knows (the declared event types, their value
 * ranges) is left to it. */
export function checkEvent(event: Event): void {
  const ids: [string, unknown][] = [
    ["eventId", event.eventId],
    ["userId", event.userId],
    ["itemId", event.itemId],
  ];
  if (event.recommendationId) ids.push(["recommendationId", event.recommendationId]);
  for (const [name, value] of ids) {
    if (typeof value !== "string" || !ID.test(value)) {
      const got = JSON.stringify(value);
      throw new RangeError(`${name}: 1 to 128 of ASCII letters, digits and -_.:@/, got ${got}`);
    }
  }
  if (typeof event.eventType !== "string" || !event.eventType) {
    throw new RangeError("eventType: is empty");
  }
  const value = event.value ?? 0;
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new RangeError(`value: must be a finite number, got ${value}`);
  }
  const timestamp = event.timestamp ?? 0;
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) {
    throw new RangeError(`timestamp: whole seconds since 1970 (0: now), got ${timestamp}`);
  }
}

export interface BatcherOptions {
  /** A batch goes when it holds this many events (1 to 1,000). */
  batchSize?: number;
  /** ... or when its oldest event has waited this long. */
  flushIntervalMs?: number;
  /** Events waiting, besides the batch being sent; past it `add` drops. */
  maxQueued?: number;
  /** Calls of one batch in all, the first included. */
  maxAttempts?: number;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Each PushEvents call's deadline. */
  callTimeoutMs?: number;
  /** Drops are "warn" (default: console.warn), retries "info" (default:
   * NODE_DEBUG=recserve), as the Python batcher logs them. */
  log?: (level: "warn" | "info", message: string) => void;
}

/** Counts of events since the batcher started (`queued` and `sending`: now).
 * Each event given to `add` (and not refused with a RangeError) is counted
 * once: in droppedFull, or, once handled, in accepted, duplicates or another
 * dropped* count. */
export interface BatcherStats {
  /** Waiting for a batch. */
  queued: number;
  /** In the batch being sent or retried. */
  sending: number;
  /** Kept by the service. */
  accepted: number;
  /** Kept before (a resend), or repeated in one batch: kept once. */
  duplicates: number;
  /** Not queued: the queue was full. */
  droppedFull: number;
  /** Refused by the service (InvalidRequestError, NotAuthorizedError, ...). */
  droppedRejected: number;
  /** Still failing after the last attempt. */
  droppedFailed: number;
  /** Still unsent when close's timeout ran out. */
  droppedAtClose: number;
  /** Calls sent again after UNAVAILABLE, RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED. */
  retries: number;
  /** Calls the service answered. */
  batches: number;
  /** The last failure of a call, retried or not. */
  lastError: Error | null;
}

type Counted = Exclude<keyof BatcherStats, "queued" | "sending" | "lastError">;
type Handled = Exclude<Counted, "droppedFull" | "retries" | "batches">;

function defaultLog(level: "warn" | "info", message: string): void {
  if (level === "warn") console.warn(`recserve events: ${message}`);
  else debug(`events: ${message}`);
}

/** Make one per process, beside its `RecserveClient` (whose connection it
 * sends on and which it does not close), and `close()` it at shutdown; one
 * still open when Node's event loop runs out of work is closed then
 * (`beforeExit`), as Python's is at the interpreter's exit.
 *
 * `add` only queues: a batch is sent, one call at a time, once it holds
 * `batchSize` events or its oldest event has waited `flushIntervalMs`. A call
 * that failed with UNAVAILABLE, RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED is
 * sent again, the same events with the same ids, after a backoff from
 * `initialBackoffMs` doubling to `maxBackoffMs` (a random part of it, as
 * gRPC's own retries), up to `maxAttempts` calls. An event the service
 * refuses (`events[N]`) is dropped and the rest of its batch, of which nothing
 * was kept, is sent without it; any other refusal drops the batch. Past
 * `maxQueued` waiting events, a new one is dropped. */
export class EventBatcher {
  private readonly batchSize: number;
  private readonly intervalMs: number;
  private readonly maxQueued: number;
  private readonly maxAttempts: number;
  private readonly backoffMs: [number, number];
  private readonly callTimeoutMs: number;
  private readonly log: (level: "warn" | "info", message: string) => void;
  private readonly queue: { at: number; event: Event }[] = [];
  // Events ever queued, taken into a batch, and handled (ended in a count).
  private added = 0;
  private taken = 0;
  private handled = 0;
  private flushTo = 0; // partial batches go at once until `taken` reaches it
  private closing = false;
  private finished = false; // the sending loop has ended
  private fullStreak = 0;
  private readonly counts: Record<Counted, number> = {
    accepted: 0,
    duplicates: 0,
    droppedFull: 0,
    droppedRejected: 0,
    droppedFailed: 0,
    droppedAtClose: 0,
    retries: 0,
    batches: 0,
  };
  private lastError: Error | null = null;
  // Aborted when close's timeout runs out: ends a backoff and the call in flight.
  private readonly abandon = new AbortController();
  private wakeUp: (() => void) | null = null; // the loop, waiting for events or their time
  private readonly waiters = new Set<() => void>(); // flush and close: events handled
  private readonly loop: Promise<void>;
  private readonly onBeforeExit = () => void this.close();

  constructor(
    private readonly client: Pick<RecserveClient, "pushEvents">,
    options: BatcherOptions = {},
  ) {
    this.batchSize = options.batchSize ?? 500;
    this.intervalMs = options.flushIntervalMs ?? 500;
    this.maxQueued = options.maxQueued ?? 10_000;
    this.maxAttempts = options.maxAttempts ?? 10;
    this.backoffMs = [options.initialBackoffMs ?? 100, options.maxBackoffMs ?? 5000];
    this.callTimeoutMs = options.callTimeoutMs ?? EVENTS_TIMEOUT_MS;
    this.log = options.log ?? defaultLog;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1 || this.batchSize > MAX_BATCH) {
      throw new RangeError(`batchSize: 1 to ${MAX_BATCH}`);
    }
    if (!(this.maxQueued >= 1 && this.maxAttempts >= 1)) {
      throw new RangeError("maxQueued, maxAttempts: at least 1");
    }
    if (!(Math.min(this.intervalMs, ...this.backoffMs, this.callTimeoutMs) > 0)) {
      throw new RangeError("flushIntervalMs, backoffs, callTimeoutMs: must be positive");
    }
    this.loop = this.run();
    // Its timers are unref'd, so an idle batcher never holds the process
    // open; when nothing else does, what is queued is sent before it exits.
    process.on("beforeExit", this.onBeforeExit);
  }

  /** Queues an event; never waits. False when the queue was full (the event
   * is dropped and counted). RangeError for an event the service would
   * refuse (a bad id: it would cost its whole batch a call). */
  add(event: Event): boolean {
    checkEvent(event);
    if (this.closing) throw new Error("EventBatcher: closed");
    if (this.queue.length < this.maxQueued) {
      this.queue.push({ at: performance.now(), event });
      this.added++;
      this.fullStreak = 0;
      if (this.queue.length === 1 || this.queue.length === this.batchSize) this.wake();
      return true;
    }
    this.counts.droppedFull++;
    if (++this.fullStreak === 1) {
      this.log("warn", `queue full (${this.maxQueued}): dropping new events`);
    }
    return false;
  }

  /** Sends what is queued now, without waiting for full batches, and
   * resolves once each event added before the call is accepted, a duplicate,
   * or dropped (`stats()` says which): true, or false if the timeout ran out
   * first (retries go on). */
  flush(timeoutMs = 10_000): Promise<boolean> {
    const target = this.added;
    this.flushTo = Math.max(this.flushTo, target);
    this.wake();
    return this.until(() => this.handled >= target, timeoutMs);
  }

  /** Sends what is queued (retrying as usual) and stops; later adds throw.
   * True when all of it was handled within the timeout; false when it ran
   * out, and what was still unsent, the call in flight included, is dropped
   * (counted). */
  async close(timeoutMs = 10_000): Promise<boolean> {
    process.off("beforeExit", this.onBeforeExit);
    this.closing = true;
    this.wake();
    if (await this.until(() => this.finished, timeoutMs)) return true;
    this.abandon.abort();
    const left = this.queue.splice(0).length;
    this.taken += left; // taken and handled at once: `sending` stays what is in flight
    this.count("droppedAtClose", left);
    this.log("warn", `closed with ${left} queued events unsent (and a batch in flight)`);
    await this.loop; // the abort ends the call or backoff at once
    return false;
  }

  stats(): BatcherStats {
    return {
      queued: this.queue.length,
      sending: this.taken - this.handled,
      ...this.counts,
      lastError: this.lastError,
    };
  }

  private count(name: Handled, events: number): void {
    this.counts[name] += events;
    this.handled += events;
    for (const check of this.waiters) check();
  }

  private wake(): void {
    const wakeUp = this.wakeUp;
    this.wakeUp = null;
    wakeUp?.();
  }

  /** Resolves on `wake()`, or after `ms` (null: only on wake). Unref'd: an
   * idle batcher keeps no process alive. */
  private sleep(ms: number | null): Promise<void> {
    return new Promise((resolve) => {
      const timer = ms === null ? undefined : setTimeout(resolve, ms).unref();
      this.wakeUp = () => (clearTimeout(timer), resolve());
    });
  }

  /** True once `done()` holds, false after `timeoutMs`. This timer is
   * ref'd: a caller awaits it, and the process stays up for the sending. */
  private until(done: () => boolean, timeoutMs: number): Promise<boolean> {
    if (done()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const finish = (ok: boolean) => {
        this.waiters.delete(check);
        clearTimeout(timer);
        resolve(ok);
      };
      const check = () => void (done() && finish(true));
      const timer = Number.isFinite(timeoutMs)
        ? setTimeout(() => finish(false), Math.max(0, timeoutMs))
        : undefined;
      this.waiters.add(check);
    });
  }

  // The sending loop: one call in flight at a time.

  private async run(): Promise<void> {
    for (let batch = await this.nextBatch(); batch; batch = await this.nextBatch()) {
      try {
        await this.send(batch);
      } catch (error) {
        // A bug, never the loop's end: the batch is dropped and counted.
        this.lastError = error instanceof Error ? error : new Error(String(error));
        this.log("warn", `dropping a batch of ${batch.length}: ${this.lastError}`);
        this.count("droppedFailed", this.taken - this.handled);
      }
    }
    this.finished = true;
    for (const check of this.waiters) check();
  }

  private async nextBatch(): Promise<Event[] | null> {
    while (!this.abandon.signal.aborted) {
      if (!this.queue.length) {
        if (this.closing) return null;
        await this.sleep(null);
        continue;
      }
      const due = this.queue[0].at + this.intervalMs;
      const ready = this.queue.length >= this.batchSize || this.taken < this.flushTo;
      if (ready || this.closing || performance.now() >= due) {
        const batch = this.queue.splice(0, this.batchSize).map((q) => q.event);
        this.taken += batch.length;
        return batch;
      }
      await this.sleep(due - performance.now());
    }
    return null;
  }

  private async send(batch: Event[]): Promise<void> {
    const unique = new Map<string, Event>();
    // The service refuses a batch naming one id twice.
    for (const event of batch) if (!unique.has(event.eventId)) unique.set(event.eventId, event);
    let events = [...unique.values()];
    this.count("duplicates", batch.length - events.length);
    const signal = this.abandon.signal;
    for (let attempt = 1; events.length; ) {
      let result;
      try {
        result = await this.client.pushEvents(events, { timeoutMs: this.callTimeoutMs, signal });
      } catch (error) {
        if (signal.aborted) return this.drop(events, "droppedAtClose", error);
        if (error instanceof InvalidRequestError) {
          events = this.withoutRefused(events, error); // sent again at once: none of it was kept
          continue;
        }
        if (!(error instanceof RecserveError)) throw error;
        const retried = RETRIED.has(error.code);
        if (!retried || attempt >= this.maxAttempts) {
          return this.drop(events, retried ? "droppedFailed" : "droppedRejected", error);
        }
        if (!(await this.backOff(attempt, error, events.length))) {
          return this.drop(events, "droppedAtClose", error);
        }
        attempt++;
        continue;
      }
      this.counts.batches++;
      const accepted = Math.min(result.accepted, events.length);
      this.count("accepted", accepted);
      this.count("duplicates", events.length - accepted); // the service's duplicates
      return;
    }
  }

  /** The batch less the event the service named (`events[N].field`);
   * nothing of it was kept. None of it when no event was named. */
  private withoutRefused(events: Event[], error: InvalidRequestError): Event[] {
    const match = REFUSED_EVENT.exec(error.field ?? "");
    const n = match ? Number(match[1]) : events.length;
    if (n >= events.length) {
      this.drop(events, "droppedRejected", error);
      return [];
    }
    this.drop([events[n]], "droppedRejected", error);
    return [...events.slice(0, n), ...events.slice(n + 1)];
  }

  /** Waits before attempt `attempt + 1`; false if close gave up meanwhile. */
  private async backOff(attempt: number, error: RecserveError, events: number): Promise<boolean> {
    const [initial, most] = this.backoffMs;
    const wait = Math.random() * Math.min(most, initial * 2 ** (attempt - 1));
    this.log("info", `${error.message}; sending ${events} again in ${Math.round(wait)} ms`);
    this.lastError = error;
    const signal = this.abandon.signal;
    const waited = await new Promise<boolean>((resolve) => {
      if (signal.aborted) return resolve(false);
      const abort = () => (clearTimeout(timer), resolve(false));
      const timer = setTimeout(() => {
        signal.removeEventListener("abort", abort);
        resolve(true);
      }, wait).unref();
      signal.addEventListener("abort", abort, { once: true });
    });
    if (waited) this.counts.retries++;
    return waited;
  }

  private drop(events: Event[], name: Handled, error: unknown): void {
    this.lastError = error instanceof Error ? error : new Error(String(error));
    if (name !== "droppedAtClose") {
      this.log("warn", `dropped ${events.length} (${name}): ${this.lastError.message}`);
    }
    this.count(name, events.length);
  }
}
