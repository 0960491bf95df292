// Typed results, independent of the generated classes.
import { create } from "@bufbuild/protobuf";
import { AppEventSchema, type AppEvent } from "./gen/recserve/recommend/v1/events_pb.js";
import {
  DegradedReason,
  FallbackSource,
  type RecommendedItem,
  type RecommendResponse,
  type SimilarItemsResponse,
} from "./gen/recserve/recommend/v1/recommend_pb.js";

export interface Explanation {
  /** "rank", or the fallback the item came from ("retrieval_order", "precomputed", ...). */
  stage: string;
  retrievalScore: number;
  /** 0-based; -1 for a fallback item. */
  retrievalRank: number;
  rankerScore: number;
  affinity: number;
}

export interface Item {
  itemId: string;
  score: number;
  title: string;
  categories: string[];
  /** Only with `debug: true`. */
  explanation: Explanation | null;
}

export interface StageTiming {
  stage: string;
  durationMs: number;
}

export interface Recommendations {
  requestId: string;
  items: Item[];
  degraded: boolean;
  /** "COLD_START", "RETRIEVER_TIMEOUT", ...; null for a full answer. */
  degradedReason: string | null;
  /** Where a degraded answer's items came from ("POPULAR"); Recommend only. */
  fallbackSource: string | null;
  modelVersion: string;
  stageTimings: StageTiming[];
  /** The id to report outcomes against once the service issues one; null until then. */
  recommendationId: string | null;
  /** The reply message itself, for fields newer than this type. */
  raw: RecommendResponse | SimilarItemsResponse;
}

/** A new user's sign-up data: MovieLens's three typed fields, or any user
 * attribute the catalogue's dataset declares by name in `values` (numbers in
 * decimal, booleans "true"/"false"); one or the other. */
export interface UserAttributes {
  age?: number;
  gender?: string;
  occupation?: string;
  values?: Record<string, string>;
}

function enumName(names: Record<number, string>, value: number): string | null {
  if (!value) return null;
  return names[value] ?? `UNKNOWN_${value}`;
}

function item(i: RecommendedItem): Item {
  const e = i.explanation;
  return {
    itemId: i.itemId,
    score: i.score,
    title: i.title,
    categories: [...i.categories],
    explanation: e
      ? {
          stage: e.stage,
          retrievalScore: e.retrievalScore,
          retrievalRank: e.retrievalRank,
          rankerScore: e.rankerScore,
          affinity: e.affinity,
        }
      : null,
  };
}

export function recommendations(reply: RecommendResponse | SimilarItemsResponse): Recommendations {
  const source = "fallbackSource" in reply ? reply.fallbackSource : 0;
  const id = (reply as { recommendationId?: unknown }).recommendationId;
  return {
    requestId: reply.requestId,
    items: reply.items.map(item),
    degraded: reply.degraded,
    degradedReason: enumName(DegradedReason, reply.degradedReason),
    fallbackSource: enumName(FallbackSource, source),
    modelVersion: reply.modelVersion,
    stageTimings: reply.stageTimings.map((t) => ({ stage: t.stage, durationMs: t.durationMs })),
    recommendationId: typeof id === "string" && id ? id : null,
    raw: reply,
  };
}

/** One thing a user did with an item, for the events API.
 *
 * `eventId` is yours and unique per event: derive it from your own record of
 * what happened (the click's id), so that sending it again (your retry, the
 * batcher's) is counted once; `newEventId()` only for an event that has no id
 * of its own. `eventType`: one the dataset declares; `value`: within its
 * range for a type with one (a rating), else 0. `timestamp`: whole seconds
 * since 1970 UTC, 0 (the default) for now. `recommendationId`: the answer the
 * item was shown in, when it was. */
export interface Event {
  eventId: string;
  userId: string;
  itemId: string;
  eventType: string;
  value?: number;
  timestamp?: number;
  recommendationId?: string;
}

/** What one PushEvents call kept: `accepted` new events, and `duplicates`,
 * events whose id was kept before (not kept again). */
export interface PushResult {
  accepted: number;
  duplicates: number;
}

export function appEvent(e: Event): AppEvent {
  return create(AppEventSchema, {
    eventId: e.eventId,
    userId: e.userId,
    itemId: e.itemId,
    eventType: e.eventType,
    // int64 on the wire; BigInt throws on a fraction rather than sending a rounded time.
    timestamp: BigInt(e.timestamp ?? 0),
    value: e.value ?? 0,
    recommendationId: e.recommendationId ?? "",
  });
}
