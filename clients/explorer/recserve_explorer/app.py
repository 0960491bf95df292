"""The explorer's backend: JSON for the page, from RecommendService through
recserve_client's asyncio client (one client, one channel, for the app)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from recserve_client import (
    AsyncRecserveClient,
    InvalidRequest,
    NotFound,
    Recommendations,
    RecserveError,
    UserAttributes,
)

from recserve_explorer.history import ArtifactHistory

STATIC = Path(__file__).resolve().parent / "static"


def error_response(error: RecserveError) -> JSONResponse:
    body: dict[str, Any] = {"error": error.message, "code": error.code}
    if isinstance(error, InvalidRequest):
        body["field"] = error.field
        return JSONResponse(body, status_code=400)
    return JSONResponse(body, status_code=404 if isinstance(error, NotFound) else 502)


def answer_body(answer: Recommendations, started: float) -> dict[str, Any]:
    body = answer.to_dict()
    body["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return body


def parse_attributes(value: str) -> UserAttributes | None:
    """ "AGE,GENDER,OCCUPATION" from the page; a malformed one is sent as typed
    so that the service names the field."""
    if not value:
        return None
    age, _, rest = value.partition(",")
    gender, _, occupation = rest.partition(",")
    return UserAttributes(int(age) if age.strip().isdigit() else 0, gender, occupation)


def rollout_versions(state_file: Path | None) -> dict[str, Any]:
    """The model rollout the stack persists (``<data_dir>/rollout/ranker.json``):
    while one runs, the stable and candidate versions to compare."""
    if state_file is None or not state_file.exists():
        return {"active": False}
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {"active": False}
    active = state.get("status") in ("running", "paused")
    steps, step = state.get("steps_percent") or [0], int(state.get("step", 0))
    return {
        "active": active,
        "status": state.get("status", ""),
        "stable": state.get("stable", ""),
        "candidate": state.get("candidate", "") if active else "",
        "share_percent": steps[min(step, len(steps) - 1)] if active else 0,
    }


def create_app(
    target: str, history: ArtifactHistory | None = None, rollout_file: Path | None = None
) -> FastAPI:
    clients: dict[str, AsyncRecserveClient] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        clients["recserve"] = AsyncRecserveClient(target)  # in the serving loop
        yield
        await clients["recserve"].close()

    app = FastAPI(title="recserve explorer", lifespan=lifespan)
    add_pages(app, target, history)

    @app.get("/api/rollout")
    async def rollout() -> dict[str, Any]:
        return rollout_versions(rollout_file)

    @app.get("/api/recommend", response_model=None)
    async def recommend(
        user_id: str,
        k: int = 20,
        debug: bool = True,
        category: list[str] = Query(default=[]),  # noqa: B008
        attributes: str = "",
        model_version: str = "",
    ) -> dict[str, Any] | JSONResponse:
        started = time.perf_counter()
        try:
            answer = await clients["recserve"].recommend(
                user_id,
                k,
                categories=category,
                debug=debug,
                attributes=parse_attributes(attributes),
                model_version=model_version,
            )
        except RecserveError as error:
            return error_response(error)
        return answer_body(answer, started)

    @app.get("/api/similar", response_model=None)
    async def similar(
        item_id: str, user_id: str = "", k: int = 10, debug: bool = True
    ) -> dict[str, Any] | JSONResponse:
        started = time.perf_counter()
        try:
            answer = await clients["recserve"].similar_items(
                item_id, k, user_id=user_id, debug=debug
            )
        except RecserveError as error:
            return error_response(error)
        return answer_body(answer, started)

    return app


def add_pages(app: FastAPI, target: str, history: ArtifactHistory | None) -> None:
    """The page, its configuration and a user's history (no stack call)."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/config")
    async def config() -> dict[str, Any]:
        return {"target": target, "history": history is not None}

    @app.get("/api/history")
    async def user_history(user_id: str) -> dict[str, Any]:
        if history is None:
            return {"available": False, "items": []}
        return {"available": True, "items": [asdict(i) for i in history.recent(user_id)]}
