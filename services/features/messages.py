"""The features service's records as their proto messages (its answers,
and the profiles it sends the ranker)."""

from __future__ import annotations

from recserve.features.v1 import features_pb2 as pb
from services.features.records import ItemRecord, UserRecord


def user_message(record: UserRecord) -> pb.UserFeatures:
    return pb.UserFeatures(
        user_id=record.user_id,
        found=record.found,
        age=record.age,
        gender=record.gender,
        occupation=record.occupation,
        rating_count=record.rating_count,
        mean_rating=record.mean_rating,
        recent_item_ids=list(record.recent_item_ids),
        seen_item_ids=list(record.seen_item_ids),
        precomputed_item_ids=list(record.precomputed_item_ids),
        precomputed_run_id=record.precomputed_run_id,
        attributes=record.attributes,
        vector_f32=record.vector_f32,
        vector_version=record.vector_version,
    )


def item_message(record: ItemRecord) -> pb.ItemFeatures:
    return pb.ItemFeatures(
        item_id=record.item_id,
        found=record.found,
        title=record.title,
        year=record.year,
        categories=list(record.categories),
        popularity=record.popularity,
        mean_rating=record.mean_rating,
        attributes=record.attributes,
    )
