// The client against an in-process server: the retry policy, the errors,
// the typed results, tokens. No stack needed.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import {
  InvalidRequestError,
  NotFoundError,
  RecserveClient,
  UnavailableError,
  transportTls,
  type ClientOptions,
} from "../src/index.js";
import { Code, fakeServer, type FakeServer } from "./fake-server.js";

let server: FakeServer;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());

async function withClient<T>(fn: (c: RecserveClient) => Promise<T>, options: ClientOptions = {}) {
  server.actions = [];
  server.attempts = [];
  const client = new RecserveClient({ target: server.target, ...options });
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}

test("typed results with explanations and timings", () =>
  withClient(async (client) => {
    const answer = await client.recommend("42", { k: 3, debug: true, requestId: "r1" });
    assert.equal(answer.requestId, "r1");
    assert.deepEqual(answer.items.map((i) => i.itemId), ["1", "2", "3"]);
    assert.equal(answer.items[0].explanation?.stage, "rank");
    assert.deepEqual(answer.stageTimings, [{ stage: "features", durationMs: 1.5 }]);
    assert.equal(answer.degraded, false);
    assert.equal(answer.recommendationId, null);
    const plain = await client.recommend("42", { k: 2 });
    assert.equal(plain.items[0].explanation, null);
    const cold = await client.recommend("new-1", { k: 2 });
    assert.equal(cold.degradedReason, "COLD_START");
    assert.equal(cold.fallbackSource, "POPULAR");
    const similar = await client.similarItems("1", { k: 4 });
    assert.equal(similar.items.length, 4);
    assert.equal(similar.fallbackSource, null);
  }));

test("UNAVAILABLE is retried within one call", () =>
  withClient(async (client) => {
    server.actions = [
      { fail: Code.Unavailable, message: "down" },
      { fail: Code.Unavailable, message: "down" },
    ];
    assert.equal((await client.recommend("42", { k: 2 })).items.length, 2);
    assert.equal(server.attempts.length, 3);
  }));

test("every call in flight failing at once is retried", () =>
  withClient(async (client) => {
    // An ingress restart fails them together; at 10 tokens, retries
    // stopped after the fifth failure.
    server.actions = Array.from({ length: 16 }, () => ({ fail: Code.Unavailable, message: "reset" }));
    const calls = Array.from({ length: 16 }, (_, n) => client.recommend(String(n), { k: 1 }));
    const answers = await Promise.all(calls);
    assert.ok(answers.every((a) => a.items.length === 1));
    assert.equal(server.attempts.length, 32);
  }));

test("a hung attempt is abandoned and sent again", () =>
  withClient(async (client) => {
    server.actions = [{ hangMs: 2000 }];
    assert.equal((await client.recommend("42", { k: 2 })).items.length, 2);
    // Two attempts: the first, hung, was abandoned rather than waited for.
    assert.equal(server.attempts.length, 2);
  }));

test("a bad request raises at once, unretried, naming the field", () =>
  withClient(async (client) => {
    server.actions = [{ fail: Code.InvalidArgument, message: "filter.exclude_item_ids[1]: bad" }];
    await assert.rejects(client.recommend("42", { k: 5 }), (error: unknown) => {
      assert.ok(error instanceof InvalidRequestError);
      assert.equal(error.code, "INVALID_ARGUMENT");
      assert.equal(error.field, "filter.exclude_item_ids[1]");
      assert.equal(error.problem, "bad");
      return true;
    });
    assert.equal(server.attempts.length, 1);
    server.actions = [{ fail: Code.NotFound, message: "item_id: no such item" }];
    await assert.rejects(client.similarItems("x"), NotFoundError);
    assert.equal(server.attempts.length, 2);
  }));

test("a read waits for a server coming back within its deadline", async () => {
  const gone = await fakeServer();
  const port = Number(gone.target.split(":")[1]);
  await gone.close(); // a port just served, and not now
  const failFast = new RecserveClient({ target: gone.target, waitForReady: false });
  await assert.rejects(failFast.recommend("42", { k: 2 }), UnavailableError);
  failFast.close();
  // The default waits, and says for what when none came: not a slow answer.
  const waiting = new RecserveClient({ target: gone.target, timeoutMs: 500 });
  await assert.rejects(waiting.recommend("42", { k: 2 }), (error: Error) => {
    assert.ok(error instanceof UnavailableError, String(error));
    assert.match(error.message, new RegExp(`no connection to ${gone.target} within`));
    return true;
  });
  waiting.close();
  // The server comes back on its port once the call has found it gone
  // (its second try: the first was refused), not after a set time.
  let tries = 0;
  let back: FakeServer | undefined;
  let restart: Promise<void> | undefined;
  const onAttempt = () => {
    tries++;
    if (tries === 2) restart = fakeServer(port).then((made) => void (back = made));
  };
  const client = new RecserveClient({ target: gone.target, timeoutMs: 5000, onAttempt });
  try {
    const answer = await client.recommend("42", { k: 2 });
    assert.equal(answer.items.length, 2);
    assert.ok(tries >= 2 && back !== undefined, "answered by the server that came back");
  } finally {
    client.close();
    await restart;
    await back?.close();
  }
});

test("retries end at max attempts with UNAVAILABLE", () =>
  withClient(async (client) => {
    server.actions = Array(5).fill({ fail: Code.Unavailable, message: "down" });
    await assert.rejects(client.recommend("42"), UnavailableError);
    assert.equal(server.attempts.length, 3);
  }));

test("without a policy nothing is retried", () =>
  withClient(
    async (client) => {
      server.actions = [{ fail: Code.Unavailable, message: "down" }];
      await assert.rejects(client.recommend("42"), UnavailableError);
      assert.equal(server.attempts.length, 1);
    },
    { retry: null },
  ));

test("a policy cannot retry client errors", () => {
  assert.throws(
    () => new RecserveClient({ retry: { retryableCodes: ["UNAVAILABLE", "NOT_FOUND"] } }),
    /never be retried/,
  );
});

test("the token is sent, and never in plaintext to another host", async () => {
  await withClient(
    async (client) => {
      await client.recommend("42", { k: 1 });
      assert.equal(server.attempts[0].authorization, "Bearer t0k");
    },
    { token: "t0k" },
  );
  // Off loopback: TLS unless told otherwise; told, the token is refused.
  assert.throws(
    () => new RecserveClient({ target: "recserve.example:8080", token: "t", plaintext: true }),
    /TLS/,
  );
  new RecserveClient({ target: "recserve.example:8080", token: "t" }).close();
});

test("TLS by default off loopback, with the CA RECSERVE_CA_FILE names", () => {
  const saved = process.env.RECSERVE_CA_FILE;
  delete process.env.RECSERVE_CA_FILE;
  try {
    assert.deepEqual(transportTls("recs.example.com:443", {}), {});
    assert.equal(transportTls("127.0.0.1:8080", {}), undefined);
    assert.equal(transportTls("10.0.0.1:8080", { plaintext: true }), undefined);
    const given = { serverName: "recs.example.com" };
    assert.equal(transportTls("127.0.0.1:8443", { tls: given }), given);
    assert.throws(() => transportTls("x:1", { tls: given, plaintext: true }), /one or the other/);
    const dir = mkdtempSync(join(tmpdir(), "recserve-ca-"));
    writeFileSync(join(dir, "ca.crt"), "PEM");
    process.env.RECSERVE_CA_FILE = join(dir, "ca.crt");
    assert.equal(String(transportTls("recs.example.com:443", {})?.ca), "PEM");
  } finally {
    if (saved === undefined) delete process.env.RECSERVE_CA_FILE;
    else process.env.RECSERVE_CA_FILE = saved;
  }
});
