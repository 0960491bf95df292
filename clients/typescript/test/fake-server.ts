// An in-process RecommendService (Connect's Node adapter, gRPC over h2c)
// whose answers a test scripts, counting every attempt that reaches it.
// Beside it an EventService that keeps events as the gateway does (all or
// nothing, once per event id), with actions of its own (as the Python
// client's tests/clients/fake_server.py).
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  DegradedReason,
  FallbackSource,
  RecommendResponseSchema,
  RecommendService,
  SimilarItemsResponseSchema,
  RecommendedItemSchema,
} from "../src/gen/recserve/recommend/v1/recommend_pb.js";
import {
  EventService,
  PushEventsResponseSchema,
  type AppEvent,
} from "../src/gen/recserve/recommend/v1/events_pb.js";

export type Action = { fail: Code; message: string } | { hangMs: number } | { ok: true };

export type EventsAction =
  | { fail: Code; message: string } // refused before anything is kept
  | { lost: Code } // kept, then the answer is lost (fails with the code)
  | { wait: Promise<void> } // held until it resolves (or the call is cancelled), then kept
  | { ok: true };

export interface EventsScript {
  actions: EventsAction[];
  calls: string[][]; // each call's event ids
  calledAt: number[]; // performance.now() of each call
  authorization: (string | null)[];
  kept: string[]; // ids, in the order kept, each once
}

export interface FakeServer {
  target: string;
  actions: Action[];
  attempts: { method: string; authorization: string | null }[];
  events: EventsScript;
  close(): Promise<void>;
}

export const EVENT_TYPES = ["click", "rating"];

/** The gateway's checks that the tests need: the first bad event, named. */
function eventProblem(events: AppEvent[]): string | null {
  const seen = new Map<string, number>();
  for (const [n, event] of events.entries()) {
    const first = seen.get(event.eventId);
    if (first !== undefined) return `events[${n}].event_id: duplicates events[${first}]`;
    seen.set(event.eventId, n);
    if (!EVENT_TYPES.includes(event.eventType)) {
      return `events[${n}].event_type: '${event.eventType}' is not a declared event type`;
    }
  }
  const count = events.length;
  return count >= 1 && count <= 1000 ? null : `events: 1 to 1000 per call, got ${count}`;
}

function items(k: number, debug: boolean): MessageInitShape<typeof RecommendedItemSchema>[] {
  return Array.from({ length: k }, (_, n) => ({
    itemId: String(n + 1),
    score: 1 - (n + 1) / 10,
    title: `Item ${n + 1}`,
    categories: ["Drama"],
    explanation: debug
      ? { stage: "rank", retrievalScore: 0.5, retrievalRank: n, rankerScore: 0.9, affinity: 0.1 }
      : undefined,
  }));
}

/** On `port` (0: a free one). */
export async function fakeServer(port = 0): Promise<FakeServer> {
  const state: Omit<FakeServer, "target" | "close"> = {
    actions: [],
    attempts: [],
    events: { actions: [], calls: [], calledAt: [], authorization: [], kept: [] },
  };
  async function act(method: string, header: Headers, signal: AbortSignal): Promise<void> {
    state.attempts.push({ method, authorization: header.get("authorization") });
    const action = state.actions.shift() ?? { ok: true };
    if ("fail" in action) throw new ConnectError(action.message, action.fail);
    if ("hangMs" in action) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, action.hangMs);
        signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
      });
    }
  }
  const routes = (router: ConnectRouter) => {
    router.service(EventService, {
      async pushEvents(req, ctx) {
        const script = state.events;
        const ids = req.events.map((e) => e.eventId);
        script.calls.push(ids);
        script.calledAt.push(performance.now());
        script.authorization.push(ctx.requestHeader.get("authorization"));
        const action = script.actions.shift() ?? { ok: true };
        if ("fail" in action) throw new ConnectError(action.message, action.fail);
        if ("wait" in action) {
          await Promise.race([
            action.wait,
            new Promise((resolve) => ctx.signal.addEventListener("abort", resolve)),
          ]);
        }
        const problem = eventProblem(req.events);
        if (problem) throw new ConnectError(problem, Code.InvalidArgument);
        const fresh = ids.filter((id) => !script.kept.includes(id));
        script.kept.push(...fresh);
        if ("lost" in action) throw new ConnectError("kept, but the answer was lost", action.lost);
        return create(PushEventsResponseSchema, {
          accepted: fresh.length,
          duplicates: ids.length - fresh.length,
        });
      },
    });
    router.service(RecommendService, {
      async recommend(req, ctx) {
        await act("Recommend", ctx.requestHeader, ctx.signal);
        const cold = req.userId.startsWith("new");
        return create(RecommendResponseSchema, {
          requestId: req.requestId || "generated",
          items: items(req.k, req.debug),
          modelVersion: cold ? "" : "m1",
          degraded: cold,
          degradedReason: cold ? DegradedReason.COLD_START : DegradedReason.UNSPECIFIED,
          fallbackSource: cold ? FallbackSource.POPULAR : FallbackSource.UNSPECIFIED,
          stageTimings: req.debug ? [{ stage: "features", durationMs: 1.5 }] : [],
        });
      },
      async similarItems(req, ctx) {
        await act("SimilarItems", ctx.requestHeader, ctx.signal);
        return create(SimilarItemsResponseSchema, {
          requestId: "s",
          items: items(req.k, req.debug),
          modelVersion: "m1",
        });
      },
    });
  };
  const server = http2.createServer(connectNodeAdapter({ routes }));
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const bound = (server.address() as AddressInfo).port;
  return Object.assign(state, {
    target: `127.0.0.1:${bound}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }) as FakeServer;
}

export { Code };
