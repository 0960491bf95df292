// An in-process RecommendService (Connect's Node adapter, gRPC over h2c)
// whose answers a test scripts, counting every attempt that reaches it.
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

export type Action = { fail: Code; message: string } | { hangMs: number } | { ok: true };

export interface FakeServer {
  target: string;
  actions: Action[];
  attempts: { method: string; authorization: string | null }[];
  close(): Promise<void>;
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

export async function fakeServer(): Promise<FakeServer> {
  const state: Omit<FakeServer, "target" | "close"> = { actions: [], attempts: [] };
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
  const routes = (router: ConnectRouter) =>
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
  const server = http2.createServer(connectNodeAdapter({ routes }));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(state, {
    target: `127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }) as FakeServer;
}

export { Code };
