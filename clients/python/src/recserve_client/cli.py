"""recserve-client: Recommend and SimilarItems from a shell.

    recserve-client recommend --user 42 [--k 10] [--category Comedy] [--debug] [--json]
    recserve-client similar --item 50 [--user 42]

The target is --target, else $RECSERVE_TARGET, else 127.0.0.1:8080.
Exit status: 0 answered, 2 a bad request (the field is named), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from recserve_client.client import DEFAULT_TARGET, RecserveClient
from recserve_client.errors import InvalidRequest, RecserveError
from recserve_client.options import CA_FILE_VARIABLE, ClientOptions, TlsOptions
from recserve_client.results import Recommendations, UserAttributes


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--target", default=os.environ.get("RECSERVE_TARGET", DEFAULT_TARGET))
    common.add_argument("--k", type=int, default=10, help="number of items (1 to 100)")
    common.add_argument("--category", action="append", default=[], help="any-of; repeatable")
    common.add_argument("--exclude", action="append", default=[], help="an item id; repeatable")
    common.add_argument("--debug", action="store_true", help="stage timings and explanations")
    common.add_argument("--timeout", type=float, default=None, help="seconds (default 1.0)")
    common.add_argument("--json", action="store_true", help="the answer as JSON")
    common.add_argument(
        "--ca", help=f"TLS: the CA certificate to trust (PEM); default ${CA_FILE_VARIABLE}"
    )
    common.add_argument("--cert", help="TLS: a client certificate (PEM)")
    common.add_argument("--key", help="TLS: the client certificate's key (PEM)")
    common.add_argument(
        "--tls", action="store_true", help="TLS to a loopback address too (off it: always)"
    )
    common.add_argument(
        "--plaintext", action="store_true", help="no TLS off loopback (a sidecar does it)"
    )
    common.add_argument("--server-name", help="TLS: the name in the server's certificate")
    common.add_argument("--token-file", help="a bearer token to send, read from this file")
    top = argparse.ArgumentParser(prog="recserve-client", description=__doc__.split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    recommend = commands.add_parser("recommend", parents=[common], help="top items for a user")
    recommend.add_argument("--user", required=True)
    recommend.add_argument(
        "--attributes", help="a new user's AGE,GENDER,OCCUPATION, or NAME=VALUE,... (declared)"
    )
    similar = commands.add_parser("similar", parents=[common], help="items like an item")
    similar.add_argument("--item", required=True)
    similar.add_argument("--user", default="")
    return top


def options(args: argparse.Namespace) -> ClientOptions:
    tls = None
    if args.ca or args.cert or args.tls:
        ca = args.ca or os.environ.get(CA_FILE_VARIABLE) or None
        tls = TlsOptions.from_files(ca, args.cert, args.key, args.server_name)
    token = None
    if args.token_file:
        with open(args.token_file) as file:
            token = file.read().strip()
    return ClientOptions(tls=tls, token=token, plaintext=args.plaintext)


def attributes(value: str | None) -> UserAttributes | None:
    if not value:
        return None
    if "=" in value:
        pairs = (part.split("=", 1) for part in value.split(","))
        return UserAttributes(values={name.strip(): text.strip() for name, text in pairs})
    age, gender, occupation = value.split(",", 2)
    return UserAttributes(int(age), gender, occupation)


def show(answer: Recommendations) -> str:
    lines = []
    if answer.degraded:
        lines.append(f"degraded: {answer.degraded_reason} (items from {answer.fallback_source})")
    lines.append(f"model {answer.model_version or '-'}  request {answer.request_id}")
    for rank, item in enumerate(answer.items, 1):
        row = f"{rank:>3}  {item.item_id:>8}  {item.score:8.4f}  {item.title}"
        if item.explanation is not None:
            e = item.explanation
            row += f"  [{e.stage} retrieval #{e.retrieval_rank} {e.retrieval_score:.3f}"
            row += f" ranker {e.ranker_score:.3f} affinity {e.affinity:.3f}]"
        lines.append(row)
    if answer.stage_timings:
        lines.append("  ".join(f"{t.stage} {t.duration_ms:.1f} ms" for t in answer.stage_timings))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    shared = {
        "categories": args.category,
        "exclude_item_ids": args.exclude,
        "debug": args.debug,
        "timeout_s": args.timeout,
    }
    try:
        with RecserveClient(args.target, options(args)) as client:
            if args.command == "recommend":
                answer = client.recommend(
                    args.user, args.k, attributes=attributes(args.attributes), **shared
                )
            else:
                answer = client.similar_items(args.item, args.k, user_id=args.user, **shared)
    except InvalidRequest as error:
        print(f"bad request: {error.field or '?'}: {error.problem}", file=sys.stderr)
        return 2
    except RecserveError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(answer.to_dict(), indent=2) if args.json else show(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
