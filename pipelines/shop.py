"""A marketplace catalogue in the dataset contract, at any size: products
in categories and brands with prices and an active flag, shoppers, and
their sessions of typed events (view, click, add to cart, purchase).

The shape, so that there is something to learn: each shopper likes a few
categories (Dirichlet weights over three drawn ones) and each session stays
in one of them; within a category, items are viewed in proportion to a
power-law popularity (Zipf, exponent ``ZIPF``); a view is clicked with
probability ``CLICK``, a click carted with ``CART``, a cart bought with
``BUY``. Shoppers' activity is log-normal, so a few are heavy. Every step
is vectorised (numpy), so 20,000,000 events take minutes, not hours.

With ``repeat`` (groceries, consumables): a share ``STAPLE_SHARE`` of the
products are staples; each shopper has ``STAPLES`` of them in their liked
categories, and a share ``RESTOCK`` of their sessions views those again
(the manifest declares ``repeat: true``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recserve_data import write_manifest, write_table
from recserve_data.manifest import (
    Column,
    ColumnType,
    EventType,
    Interactions,
    Manifest,
    Role,
    Table,
)

ZIPF = 1.1
CLICK, CART, BUY = 0.3, 0.25, 0.5
SESSION_VIEWS = 8  # views in one session, about
DAYS = 180
START = 1_700_000_000
MIN_VIEWS = 100  # per shopper: enough distinct clicked items for the build's split, mostly
STAPLE_SHARE, STAPLES, RESTOCK = 0.1, 6, 0.3  # with repeat purchases
GENERATED = "generated.json"  # the size and seed, beside the tables
FUNNEL_STEP_S = 10  # a click comes this long after its view, a cart after the click...


@dataclass(frozen=True)
class ShopSize:
    items: int
    users: int
    events: int  # about: views are drawn so that all event types add up to this
    categories: int = 0  # 0: about one per 500 items, between 8 and 200
    brands: int = 0  # 0: about one per 100 items, at least 10
    repeat: bool = False  # shoppers buy their staples again

    @property
    def category_count(self) -> int:
        return self.categories or int(np.clip(self.items // 500, 8, 200))

    @property
    def brand_count(self) -> int:
        return self.brands or max(10, self.items // 100)


def manifest(name: str, repeat: bool = False) -> Manifest:
    return Manifest(
        format=1,
        name=name,
        title=f"A generated marketplace ({name})",
        source="python -m pipelines generate-shop (pipelines/shop.py)",
        items=Table(
            file="items.parquet",
            columns={
                "brand": Column(type=ColumnType.CATEGORICAL, filterable=True, nullable=False),
                "price": Column(type=ColumnType.NUMERIC, min=0, filterable=True, nullable=False),
            },
        ),
        interactions=Interactions(
            file="interactions.parquet",
            event_types={
                "view": EventType(role=Role.EXPOSURE, weight=0.1),
                "click": EventType(role=Role.POSITIVE, weight=1),
                "add_to_cart": EventType(role=Role.POSITIVE, weight=3),
                "purchase": EventType(role=Role.POSITIVE, weight=5),
            },
            repeat=repeat,
        ),
        users=Table(
            file="users.parquet",
            columns={"region": Column(type=ColumnType.CATEGORICAL, nullable=False)},
        ),
    )


def items_table(size: ShopSize, rng: np.random.Generator) -> pd.DataFrame:
    n, categories = size.items, size.category_count
    category = rng.integers(0, categories, n)
    second = np.where(rng.random(n) < 0.1, rng.integers(0, categories, n), -1)
    brand = (category * 7 + rng.integers(0, 5, n)) % size.brand_count  # brands lean to categories
    price = np.round(rng.lognormal(3.0 + 0.02 * category, 0.6), 2)
    names = [f"c{c:03d}" for c in range(categories)]
    return pd.DataFrame(
        {
            "item_id": [f"p{i}" for i in range(1, n + 1)],
            "title": [f"{names[c]} product {i}" for i, c in enumerate(category, 1)],
            "categories": [
                [names[c]] if s < 0 or s == c else [names[c], names[s]]
                for c, s in zip(category, second, strict=True)
            ],
            "active": rng.random(n) >= 0.05,
            "brand": [f"b{b:04d}" for b in brand],
            "price": price,
        }
    )


@dataclass(frozen=True)
class Tastes:
    """What the generator drew, which no model sees: each shopper's liked
    categories and each one's share of their sessions, each item's share
    of its category's views (restocks aside)."""

    liked: np.ndarray  # [users, 3] category indices
    session_share: np.ndarray  # [users, 3]
    view_share: np.ndarray  # [items]

    def view_chances(self, user: int, first_category: np.ndarray) -> np.ndarray:
        """[items]: the chance that one of ``user``'s views is each item."""
        chance = np.zeros(len(self.view_share))
        for liked, share in zip(self.liked[user], self.session_share[user], strict=True):
            chance += share * (first_category == liked)
        return chance * self.view_share


def views(
    size: ShopSize, items: pd.DataFrame, rng: np.random.Generator
) -> tuple[pd.DataFrame, Tastes]:
    """user, item, timestamp of every view: sessions in a liked category,
    items by their popularity there; and the tastes drawn for them."""
    per_view = 1 + CLICK * (1 + CART * (1 + BUY))
    total = max(int(size.events / per_view), size.users * MIN_VIEWS)
    activity = rng.lognormal(0.0, 0.8, size.users)
    counts = MIN_VIEWS + rng.multinomial(total - size.users * MIN_VIEWS, activity / activity.sum())
    user = np.repeat(np.arange(size.users), counts)
    position = np.arange(len(user)) - np.repeat(np.cumsum(counts) - counts, counts)
    session = position // SESSION_VIEWS
    liked = rng.integers(0, size.category_count, (size.users, 3))
    weights = rng.dirichlet(np.ones(3), size.users).cumsum(axis=1)
    sessions = pd.DataFrame({"user": user, "session": session}).drop_duplicates()
    pick = (rng.random(len(sessions))[:, None] > weights[sessions["user"]]).sum(axis=1)
    category_of = dict(
        zip(
            zip(sessions["user"], sessions["session"], strict=True),
            liked[sessions["user"], np.minimum(pick, 2)],
            strict=True,
        )
    )
    category = np.fromiter((category_of[k] for k in zip(user, session, strict=True)), np.int64)
    first = np.array([int(c[0][1:]) for c in items["categories"]])
    item = np.zeros(len(user), dtype=np.int64)
    view_share = np.zeros(len(items))
    for c in range(size.category_count):
        members = np.flatnonzero(first == c)
        mask = category == c
        if not len(members) or not mask.any():
            continue
        popularity = 1.0 / np.arange(1, len(members) + 1) ** ZIPF
        order = rng.permutation(members)
        view_share[order] = popularity / popularity.sum()
        item[mask] = order[
            np.searchsorted(np.cumsum(popularity) / popularity.sum(), rng.random(mask.sum()))
        ]
    if size.repeat:
        restock = restocks(sessions, rng)
        again = np.fromiter((k in restock for k in zip(user, session, strict=True)), bool)
        own = staples(size, items, liked, first, rng)
        item[again] = own[user[again], rng.integers(0, STAPLES, int(again.sum()))]
    start = START + rng.integers(0, DAYS * 86_400, (size.users, int(session.max()) + 1))
    timestamp = start[user, session] + (position % SESSION_VIEWS) * 40
    tastes = Tastes(liked, np.diff(weights, prepend=0.0, axis=1), view_share)
    return pd.DataFrame({"user": user, "item": item, "timestamp": timestamp}), tastes


def restocks(sessions: pd.DataFrame, rng: np.random.Generator) -> set[tuple[int, int]]:
    """The (user, session) pairs that restock staples."""
    chosen = sessions[rng.random(len(sessions)) < RESTOCK]
    return set(zip(chosen["user"], chosen["session"], strict=True))


def staples(
    size: ShopSize,
    items: pd.DataFrame,
    liked: np.ndarray,
    first: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """[users, STAPLES] item indices: each shopper's staples, drawn from the
    staple products of their liked categories (of any, where those have none)."""
    staple = np.flatnonzero(rng.random(size.items) < STAPLE_SHARE)
    if not len(staple):
        staple = np.arange(size.items)
    by_category = {c: staple[first[staple] == c] for c in range(size.category_count)}
    out = np.empty((size.users, STAPLES), np.int64)
    for u in range(size.users):
        pool = np.concatenate([by_category[c] for c in liked[u]])
        out[u] = rng.choice(pool if len(pool) else staple, STAPLES)
    return out


def funnel(seen: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """The views and what followed them: clicks, carts, purchases, seconds apart."""
    steps = [("view", seen)]
    current = seen
    for name, chance in (("click", CLICK), ("add_to_cart", CART), ("purchase", BUY)):
        current = current[rng.random(len(current)) < chance].assign(
            timestamp=lambda f: f["timestamp"] + FUNNEL_STEP_S
        )
        steps.append((name, current))
    return pd.concat([f.assign(event_type=name) for name, f in steps], ignore_index=True)


def write_shop(out: Path, size: ShopSize, seed: int = 7, name: str = "shop") -> Path:
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    items = items_table(size, rng)
    seen, _ = views(size, items, rng)
    events = funnel(seen, rng)
    interactions = pd.DataFrame(
        {
            "user_id": "s" + (events["user"] + 1).astype(str),
            "item_id": items["item_id"].to_numpy()[events["item"].to_numpy()],
            "timestamp": events["timestamp"].astype(np.int64),
            "event_type": events["event_type"],
        }
    ).sort_values(["timestamp", "user_id"], kind="stable")
    users = pd.DataFrame(
        {
            "user_id": [f"s{u}" for u in range(1, size.users + 1)],
            "region": rng.choice(["north", "south", "east", "west"], size.users),
        }
    )
    spec = manifest(name, size.repeat)
    tables = spec.tables()
    for kind, frame in (("items", items), ("interactions", interactions), ("users", users)):
        write_table(frame, out, tables[kind], spec.csv)
    write_manifest(out, spec)
    (out / GENERATED).write_text(json.dumps({"size": asdict(size), "seed": seed}) + "\n")
    return out


def tastes(dataset_dir: Path) -> Tastes | None:
    """The tastes a generated shop was drawn with (drawn again from its
    size and seed); None for a dataset the generator did not write, or one
    whose shoppers restock (their staples are not in these tastes)."""
    path = dataset_dir / GENERATED
    if not path.exists():
        return None
    made = json.loads(path.read_text())
    size = ShopSize(**made["size"])
    if size.repeat:
        return None
    rng = np.random.default_rng(made["seed"])
    _, drawn = views(size, items_table(size, rng), rng)
    return drawn
