// pushEvents, one call, and EventBatcher's batches (bounded by size and by
// time), retries with the same event ids, refusals dropped and counted, a
// full queue, flush and close: the Python client's events tests
// (tests/clients/test_python_client_events.py) against the in-process
// EventService. No stack needed.
//
// Waits poll with generous timeouts (a loaded machine); nothing asserts that
// something happened within a time, only that it did not happen before one.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, beforeEach, test } from "node:test";
import { promisify } from "node:util";
import {
  checkEvent,
  EventBatcher,
  InvalidRequestError,
  NotAuthorizedError,
  RecserveClient,
  RecserveError,
  UnavailableError,
  newEventId,
  type BatcherOptions,
  type Event,
} from "../src/index.js";
import { Code, fakeServer, type EventsAction, type FakeServer } from "./fake-server.js";

const NEVER_BY_TIME = 600_000; // for a test that waits for a batch of a size
const FAST_RETRY = { initialBackoffMs: 10, maxBackoffMs: 50 };

let server: FakeServer;
before(async () => {
  server = await fakeServer();
});
beforeEach(() => {
  server.events = { actions: [], calls: [], calledAt: [], authorization: [], kept: [] };
});
after(() => server.close());

function click(n: number | string, fields: Partial<Event> = {}): Event {
  return { eventId: `click-${n}`, userId: "42", itemId: String(n), eventType: "click", ...fields };
}

const ids = (...events: Event[]) => events.map((e) => e.eventId);

async function waitFor(condition: () => boolean, what: string, timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A client and a batcher on the fake server, closed after `fn`; `logged`
 * holds what the batcher logged ("warn ..." and "info ..."). */
async function withBatcher(
  options: BatcherOptions,
  fn: (batcher: EventBatcher, logged: string[]) => Promise<void>,
) {
  const client = new RecserveClient({ target: server.target });
  const logged: string[] = [];
  const batcher = new EventBatcher(client, {
    log: (level, message) => logged.push(`${level} ${message}`),
    ...options,
  });
  try {
    await fn(batcher, logged);
  } finally {
    await batcher.close(30_000);
    client.close();
  }
}

test("pushEvents is one call, kept once per id, with the token", async () => {
  const client = new RecserveClient({ target: server.target, token: "app-t0k" });
  try {
    const batch = [
      click(1, { recommendationId: "rec-1" }),
      click(2, { value: 4, eventType: "rating" }),
    ];
    assert.deepEqual(await client.pushEvents(batch), { accepted: 2, duplicates: 0 });
    assert.deepEqual(await client.pushEvents(batch), { accepted: 0, duplicates: 2 });
    const refused = client.pushEvents([click(3), click(4, { eventType: "purchase" })]);
    await assert.rejects(refused, (error) => {
      assert.ok(error instanceof InvalidRequestError);
      assert.equal(error.field, "events[1].event_type");
      return true;
    });
    // Not retried by the client's policy: it names the reads only.
    server.events.actions = [{ fail: Code.Unavailable, message: "down" }];
    await assert.rejects(client.pushEvents([click(5)]), UnavailableError);
    server.events.actions = [{ fail: Code.Unauthenticated, message: "no token" }];
    await assert.rejects(client.pushEvents([click(6)]), NotAuthorizedError);
  } finally {
    client.close();
  }
  const events = server.events;
  const first = ["click-1", "click-2"];
  assert.deepEqual(events.calls, [first, first, ["click-3", "click-4"], ["click-5"], ["click-6"]]);
  assert.deepEqual(events.kept, ["click-1", "click-2"]);
  assert.equal(events.authorization[0], "Bearer app-t0k");
});

test("a batch goes when it is full", () =>
  withBatcher({ batchSize: 3, flushIntervalMs: NEVER_BY_TIME }, async (batcher) => {
    const events = Array.from({ length: 7 }, (_, n) => click(n));
    assert.ok(events.every((e) => batcher.add(e)));
    await waitFor(() => server.events.calls.length === 2, "two full batches");
    assert.deepEqual(server.events.calls, [ids(...events.slice(0, 3)), ids(...events.slice(3, 6))]);
    await waitFor(() => batcher.stats().accepted === 6, "their answers");
    assert.equal(batcher.stats().queued, 1); // the seventh waits for more, or its time
    assert.equal(await batcher.close(30_000), true);
    assert.deepEqual(server.events.calls.slice(2), [["click-6"]]); // close sent it
    const { accepted, batches, queued, sending } = batcher.stats();
    assert.deepEqual([accepted, batches, queued, sending], [7, 3, 0, 0]);
  }));

test("a partial batch goes when its oldest event has waited the interval", () =>
  withBatcher({ flushIntervalMs: 200 }, async (batcher) => {
    const started = performance.now();
    batcher.add(click(1));
    await waitFor(() => batcher.stats().accepted === 1, "the event sent by time");
    assert.ok(server.events.calledAt[0] - started >= 200, "sent before its time");
    assert.equal(batcher.stats().batches, 1);
  }));

const FAILURES: [string, EventsAction, number][] = [
  ["UNAVAILABLE", { fail: Code.Unavailable, message: "no healthy upstream" }, 3],
  ["RESOURCE_EXHAUSTED", { fail: Code.ResourceExhausted, message: "local_rate_limited" }, 3],
  // Kept, and the answer lost: the resend is counted as duplicates.
  ["DEADLINE_EXCEEDED", { lost: Code.DeadlineExceeded }, 0],
  ["UNAVAILABLE", { lost: Code.Unavailable }, 0],
];
for (const [code, failure, accepted] of FAILURES) {
  const how = "lost" in failure ? "answer lost" : "refused";
  test(`${code} (${how}) is sent again with the same ids, kept once`, () =>
    withBatcher(FAST_RETRY, async (batcher) => {
      server.events.actions = [failure];
      const events = [click(1), click(2), click(3)];
      for (const event of events) batcher.add(event);
      assert.equal(await batcher.flush(30_000), true);
      const stats = batcher.stats();
      assert.deepEqual(server.events.calls, [ids(...events), ids(...events)]);
      assert.deepEqual(server.events.kept, ids(...events));
      const counts = [stats.accepted, stats.duplicates, stats.retries];
      assert.deepEqual(counts, [accepted, 3 - accepted, 1]);
      assert.ok(stats.lastError instanceof RecserveError);
      assert.equal(stats.lastError.code, code);
    }));
}

test("retries end at max attempts and the batch is dropped and counted", () =>
  withBatcher({ maxAttempts: 3, ...FAST_RETRY }, async (batcher) => {
    server.events.actions = Array(5).fill({ fail: Code.Unavailable, message: "down" });
    batcher.add(click(1));
    batcher.add(click(2));
    assert.equal(await batcher.flush(30_000), true);
    const stats = batcher.stats();
    assert.equal(server.events.calls.length, 3);
    assert.deepEqual(server.events.kept, []);
    assert.deepEqual([stats.droppedFailed, stats.retries, stats.accepted], [2, 2, 0]);
    assert.ok(stats.lastError instanceof UnavailableError);
  }));

test("a refused event is dropped, never resent, and the rest is kept", () =>
  withBatcher(FAST_RETRY, async (batcher, logged) => {
    const events = [click(1), click(2, { eventType: "purchase" }), click(3)];
    for (const event of events) batcher.add(event);
    assert.equal(await batcher.flush(30_000), true);
    const stats = batcher.stats();
    // Nothing of the refused call was kept: the rest goes once, without it.
    assert.deepEqual(server.events.calls, [ids(...events), ["click-1", "click-3"]]);
    assert.deepEqual(server.events.kept, ["click-1", "click-3"]);
    assert.deepEqual([stats.accepted, stats.droppedRejected, stats.retries], [2, 1, 0]);
    assert.ok(stats.lastError instanceof InvalidRequestError);
    assert.equal(stats.lastError.field, "events[1].event_type");
    assert.ok(logged.some((line) => /^warn .*events\[1\]\.event_type/.test(line)));
  }));

const REFUSALS = [Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.Internal];
for (const code of REFUSALS) {
  test(`a refused batch (${Code[code]}) is dropped whole after one call`, () =>
    withBatcher(FAST_RETRY, async (batcher, logged) => {
      server.events.actions = [{ fail: code, message: "refused" }]; // naming no event
      batcher.add(click(1));
      batcher.add(click(2));
      assert.equal(await batcher.flush(30_000), true);
      const stats = batcher.stats();
      assert.equal(server.events.calls.length, 1);
      assert.deepEqual(server.events.kept, []);
      assert.deepEqual([stats.droppedRejected, stats.retries, stats.accepted], [2, 0, 0]);
      assert.ok(logged.some((line) => line.includes("dropped 2")));
    }));
}

const SMALL_QUEUE = { batchSize: 2, maxQueued: 3, flushIntervalMs: NEVER_BY_TIME };
test("past maxQueued new events are dropped and counted; add never waits", () =>
  withBatcher(SMALL_QUEUE, async (batcher, logged) => {
    let release = () => {};
    server.events.actions = [{ wait: new Promise<void>((resolve) => (release = resolve)) }];
    try {
      assert.ok(batcher.add(click(1)) && batcher.add(click(2)));
      await waitFor(() => server.events.calls.length === 1, "the first batch held at the server");
      const added = [3, 4, 5, 6, 7].map((n) => batcher.add(click(n)));
      assert.deepEqual(added, [true, true, true, false, false]); // the newest are dropped
      const stats = batcher.stats();
      assert.deepEqual([stats.queued, stats.sending, stats.droppedFull], [3, 2, 2]);
      assert.equal(logged.filter((line) => line.includes("queue full")).length, 1); // once a spell
    } finally {
      release();
    }
    assert.equal(await batcher.close(30_000), true);
    assert.deepEqual(server.events.kept, [1, 2, 3, 4, 5].map((n) => `click-${n}`));
    assert.equal(batcher.stats().accepted, 5);
  }));

test("close sends what is queued, and later adds throw", () =>
  withBatcher({ flushIntervalMs: NEVER_BY_TIME }, async (batcher) => {
    const events = Array.from({ length: 5 }, (_, n) => click(n));
    for (const event of events) batcher.add(event);
    assert.equal(await batcher.close(30_000), true);
    assert.deepEqual(server.events.calls, [ids(...events)]);
    assert.equal(batcher.stats().accepted, 5);
    assert.equal(batcher.stats().queued, 0);
    assert.throws(() => batcher.add(click(9)), /closed/);
    assert.equal(await batcher.close(), true); // again: nothing to do
  }));

test("flush sends a partial batch and the batcher goes on", () =>
  withBatcher({ flushIntervalMs: NEVER_BY_TIME }, async (batcher) => {
    batcher.add(click(1));
    assert.equal(await batcher.flush(30_000), true);
    assert.deepEqual(server.events.kept, ["click-1"]);
    batcher.add(click(2));
    assert.equal(await batcher.flush(30_000), true);
    assert.deepEqual(server.events.calls, [["click-1"], ["click-2"]]);
  }));

const SLOW_RETRY = { initialBackoffMs: 60_000, maxBackoffMs: 60_000 };
test("a close whose timeout runs out drops and counts what is left", () =>
  withBatcher(
    { batchSize: 2, flushIntervalMs: NEVER_BY_TIME, ...SLOW_RETRY },
    async (batcher, logged) => {
      server.events.actions = Array(20).fill({ fail: Code.Unavailable, message: "down" });
      for (let n = 0; n < 5; n++) batcher.add(click(n));
      assert.equal(await batcher.close(200), false);
      const stats = batcher.stats();
      const counts = [stats.droppedAtClose, stats.accepted, stats.queued, stats.sending];
      assert.deepEqual(counts, [5, 0, 0, 0]);
      assert.deepEqual(server.events.kept, []);
      assert.ok(logged.some((line) => line.includes("unsent")));
    },
  ));

test("an id repeated in one batch is sent once", () =>
  withBatcher({ flushIntervalMs: NEVER_BY_TIME }, async (batcher) => {
    for (const event of [click(1), click(2), click(1)]) batcher.add(event);
    assert.equal(await batcher.flush(30_000), true);
    const stats = batcher.stats();
    assert.deepEqual(server.events.calls, [["click-1", "click-2"]]);
    assert.deepEqual([stats.accepted, stats.duplicates], [2, 1]);
  }));

test("an event the service would refuse throws at add", () =>
  withBatcher({}, async (batcher) => {
    const refused: [Event, string][] = [
      [{ ...click(1), eventId: "a b" }, "eventId"],
      [{ ...click(1), eventId: "" }, "eventId"],
      [{ ...click(1), itemId: "x".repeat(129) }, "itemId"],
      [click(1, { recommendationId: "r?" }), "recommendationId"],
      [click(1, { eventType: "" }), "eventType"],
      [click(1, { value: Number.NaN }), "value"],
      [click(1, { timestamp: -1 }), "timestamp"],
      [click(1, { timestamp: 1.5 }), "timestamp"],
    ];
    for (const [event, field] of refused) {
      assert.throws(() => batcher.add(event), new RegExp(`^RangeError: ${field}: `));
    }
    assert.equal(batcher.stats().queued, 0);
    assert.equal(await batcher.flush(30_000), true);
    assert.deepEqual(server.events.calls, []);
  }));

test("new event ids are fresh and within the id policy", () => {
  const made = new Set(Array.from({ length: 1000 }, newEventId));
  assert.equal(made.size, 1000);
  for (const eventId of [...made].slice(0, 10)) checkEvent({ ...click(1), eventId });
});

test("the batcher refuses bounds the service does not take", () => {
  const client = new RecserveClient({ target: server.target });
  try {
    assert.throws(() => new EventBatcher(client, { batchSize: 1001 }), /batchSize/);
    assert.throws(() => new EventBatcher(client, { flushIntervalMs: 0 }), /positive/);
  } finally {
    client.close();
  }
});

// Never closed, its client neither: the batcher's timers hold nothing open,
// and when the loop runs dry it sends what is queued before the process exits.
const EXITS_WITHOUT_CLOSE = `
const [index, target] = process.argv.slice(1);
const { EventBatcher, RecserveClient } = await import(index);
const batcher = new EventBatcher(new RecserveClient({ target }), { flushIntervalMs: 600_000 });
for (let n = 0; n < 3; n++) {
  batcher.add({ eventId: "exit-" + n, userId: "42", itemId: String(n), eventType: "click" });
}
`;

test("a batcher left open is closed when Node runs out of work", async () => {
  const index = new URL("../src/index.js", import.meta.url).href;
  const args = ["--input-type=module", "-e", EXITS_WITHOUT_CLOSE, index, server.target];
  await promisify(execFile)(process.execPath, args, { timeout: 120_000 });
  assert.deepEqual(server.events.kept, ["exit-0", "exit-1", "exit-2"]);
});
