"""What `make run` shows once the stack is up: real answers through Envoy."""

from __future__ import annotations

import grpc
from rich.table import Table

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_cli import console as cli_console
from recserve_stack.settings import StackSettings

SAMPLE_USERS = ("1", "42", "314")
SAMPLE_ITEM = "50"  # Star Wars (1977)


def _table(title: str, reply: pb.RecommendResponse | pb.SimilarItemsResponse) -> Table:
    note = ""
    if reply.degraded:
        note = f" [yellow](degraded: {pb.DegradedReason.Name(reply.degraded_reason)})[/]"
    table = Table(title=title + note, title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("movie")
    table.add_column("genres")
    table.add_column("score", justify="right")
    for n, item in enumerate(reply.items, 1):
        table.add_row(str(n), item.title, ", ".join(item.categories), f"{item.score:.3f}")
    return table


async def show(settings: StackSettings) -> None:
    console = cli_console()
    address = f"{settings.host}:{settings.envoy_port}"
    async with grpc.aio.insecure_channel(address) as channel:
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        for user in SAMPLE_USERS:
            reply = await stub.Recommend(
                pb.RecommendRequest(user_id=user, k=5, debug=True), timeout=2
            )
            console.print(_table(f"Top 5 for user {user} (model {reply.model_version})", reply))
            stages = ", ".join(f"{t.stage} {t.duration_ms:.1f} ms" for t in reply.stage_timings)
            console.print(f"  [dim]{stages}[/]")
        reply = await stub.Recommend(
            pb.RecommendRequest(user_id="42", k=5, filter=pb.ItemFilter(categories=["Horror"])),
            timeout=2,
        )
        console.print(_table("User 42, only Horror", reply))
        # A user the stack has never seen, with sign-up attributes: the list
        # for users like them, not the global popular one.
        newcomer = pb.UserAttributes(age=22, gender="F", occupation="student")
        reply = await stub.Recommend(
            pb.RecommendRequest(user_id="someone-new", k=5, attributes=newcomer), timeout=2
        )
        source = pb.FallbackSource.Name(reply.fallback_source).removeprefix("FALLBACK_SOURCE_")
        console.print(_table(f"A new user, 22, F, student (from {source})", reply))
        similar = await stub.SimilarItems(
            pb.SimilarItemsRequest(item_id=SAMPLE_ITEM, k=5), timeout=2
        )
        console.print(_table("Movies similar to Star Wars (1977)", similar))
    token = settings.data_dir / "auth" / "admin.token"
    console.print(
        "\n[bold]Try it yourself[/] (Ctrl-C stops everything):\n"
        f'  curl -s -d \'{{"user_id":"42","k":10}}\' http://{address}/v1/recommend\n'
        f'  curl -s -d \'{{"item_id":"50","k":5}}\' http://{address}/v1/similar-items\n'
        f'  grpcurl -plaintext -d \'{{"user_id":"42","k":10,"debug":true}}\' {address} '
        "recserve.recommend.v1.RecommendService/Recommend\n"
        f"  grpcurl -plaintext {address} list\n"
        "  admin calls need the token:\n"
        f'  grpcurl -plaintext -H "authorization: Bearer $(cat {token})" '
        f'-d \'{{"item_ids":["50"],"mode":"DELETE_MODE_SOFT"}}\' {address} '
        "recserve.retriever.v1.RetrieverService/DeleteItems\n"
        "  nightly re-scoring on Spark, in another terminal (users' own fallback lists):\n"
        f"  .venv/bin/python -m pipelines rescore run --data-dir {settings.data_dir}\n"
        "  model rollouts (canary by user, judged, rolled back by themselves):\n"
        "  .venv/bin/python -m recserve_stack rollout status\n"
    )
