"""docs/configuration.md, generated from the settings classes themselves: each
field's description, default, allowed values and environment variable.

    python scripts/config_reference.py           # write docs/configuration.md
    python scripts/config_reference.py --check   # exit 1 if it is stale

Run in the project's .venv. A field without a description stops it: the
description is the documentation.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"
for folder in (ROOT, ROOT / "libs", ROOT / "apps"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

SHARED = ("recserve_kit.config", "ServiceSettings")
# (heading, module, class, what the section is about)
SECTIONS = [
    (
        "gateway",
        "services.gateway.config",
        "GatewaySettings",
        "the latency budget, its stages, load shedding and the user-vector cache.",
    ),
    (
        "features",
        "services.features.config",
        "FeaturesSettings",
        "the Feast online store and the in-process item cache.",
    ),
    (
        "retriever",
        "services.retriever.config",
        "RetrieverSettings",
        "Qdrant (embedded Edge shard or a server) and its HNSW index.",
    ),
    (
        "ranker",
        "services.ranker.config",
        "RankerSettings",
        "Triton, the models, and the model rollout's defaults and limits.",
    ),
    (
        "local stack",
        "recserve_stack.settings",
        "StackSettings",
        "the local runner "
        "(`python -m recserve_stack up`, `make run`): ports, paths, Envoy, Triton, TLS. "
        "It passes the services their own `RECSERVE_<SERVICE>_*` variables from these.",
    ),
]
# Defaults that depend on the machine, said in words so the page is one text.
DEFAULT_WORDS = {
    ("StackSettings", "gateway_extra_ports"): (
        "`[50061]` on 2+ cores, but `[]` with each service apart on fewer than 4"
    ),
    ("StackSettings", "gateway_standby_port"): "`50062` where no extra gateway runs, else `0`",
    ("StackSettings", "one_process"): "`true` on fewer than 4 cores, else `false`",
    ("StackSettings", "python"): "the Python that runs the runner",
}
# Read straight from the environment, outside the settings classes.
OTHERS = [
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "every service, Envoy, Triton",
        "Send spans over OTLP "
        "(gRPC) to this collector; unset, the services write OTLP JSON to "
        "`<data_dir>/traces/*.jsonl` and Envoy and Triton export nothing.",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "every service, Envoy",
        "The same for traces only; wins over the one above.",
    ),
    (
        "OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG",
        "every service",
        "Sampling; the local "
        "runner sets `parentbased_traceidratio` and `RECSERVE_STACK_TRACE_SAMPLE_RATIO` "
        "unless they are set.",
    ),
    (
        "RECSERVE_STACK_TRITON_OTLP_HTTP_URL",
        "the local runner",
        "Triton's OTLP/HTTP traces "
        "URL; unset: the OTLP endpoint's host, its port + 1, `/v1/traces`.",
    ),
    (
        "GRPC_EXPERIMENTS",
        "every service",
        "gRPC core's experiments; unset, the services turn off `event_engine_client` and "
        "`event_engine_listener` (12% less CPU per Recommend here, docs/benchmarks.md).",
    ),
    ("RECSERVE_SPARK_DRIVER_MEMORY", "the re-scoring job", "Spark driver memory (default `2g`)."),
]


def settings_class(module: str, name: str) -> type[BaseSettings]:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, BaseSettings), f"{module}.{name} is not a settings class"
    return cls


def env_name(cls: type[BaseSettings], field: str) -> str:
    from recserve_kit.config import env_name as kit_env_name

    return kit_env_name(cls, field)


def own_fields(cls: type[BaseSettings], base: type[BaseSettings]) -> dict[str, FieldInfo]:
    """The fields a class declares or overrides, beyond those of ``base``."""
    inherited = base.model_fields
    return {
        name: info
        for name, info in cls.model_fields.items()
        if name not in inherited or repr(info) != repr(inherited[name])
    }


def missing_descriptions() -> list[str]:
    """Every settings field without a description, as Class.field."""
    classes = [settings_class(*SHARED)] + [settings_class(m, c) for _, m, c, _ in SECTIONS]
    return [
        f"{cls.__name__}.{name}"
        for cls in classes
        for name, info in cls.model_fields.items()
        if not (info.description or "").strip()
    ]


def default_text(cls: type[BaseSettings], name: str, info: FieldInfo) -> str:
    words = DEFAULT_WORDS.get((cls.__name__, name))
    if words:
        return words
    value: Any = info.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, Path):
        if value.is_absolute() and value.is_relative_to(ROOT):
            return f"`<repo>/{value.relative_to(ROOT)}`"
        return f"`{value}`"
    if isinstance(value, bool | list | dict):
        return f"`{json.dumps(value)}`"
    return f"`{value}`" if value != "" else "empty"


def allowed_text(info: FieldInfo) -> str:
    bounds: dict[str, Any] = {}
    for item in info.metadata:
        if getattr(item, "pattern", None):
            return f"`{item.pattern}`"
        for key in ("ge", "gt", "le", "lt"):
            if getattr(item, key, None) is not None:
                bounds[key] = getattr(item, key)
    low = ("ge", bounds["ge"]) if "ge" in bounds else ("gt", bounds.get("gt"))
    high = ("le", bounds["le"]) if "le" in bounds else ("lt", bounds.get("lt"))
    if low[0] == "ge" and high[0] == "le" and low[1] is not None and high[1] is not None:
        return f"{low[1]} to {high[1]}"
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return ", ".join(f"{signs[k]} {v}" for k, v in (low, high) if v is not None)


def type_text(info: FieldInfo) -> str:
    annotation = info.annotation
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return text.replace("pathlib.", "").replace("typing.", "")


def cell(text: str) -> str:
    """Markdown table cell: pipes escaped, `<name>` kept visible outside code."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(
        p if i % 2 else re.sub(r"<(?=[A-Za-z])", r"\\<", p) for i, p in enumerate(parts)
    )


def with_variables(text: str, variables: dict[str, str]) -> str:
    """Field names in a description (those with an underscore) as their variables."""
    names = "|".join(sorted((n for n in variables if "_" in n), key=len, reverse=True))
    if not names:
        return text
    pattern = re.compile(rf"(?<![\w<`])({names})(?![\w>`])")
    return pattern.sub(lambda m: f"`{variables[m.group(1)]}`", text)


def row(variable: str, kind: str, default: str, allowed: str, description: str) -> str:
    return (
        f"| `{variable}` | {cell(kind)} | {cell(default)} | {cell(allowed)} | {cell(description)} |"
    )


HEADER = "| variable | type | default | allowed | what it does |\n|---|---|---|---|---|"

INTRO = """\
# Configuration reference

Generated by `python scripts/config_reference.py` from the settings classes:
each field's own description, default and validation. Do not edit this page;
edit the field's description and run the script. `make test` fails when the
page is stale (`tests/unit/test_config_reference.py`).

Every setting is an environment variable, the class's prefix plus the field
name in upper case, read and validated when the process starts: a bad value
stops it (exit code 2) with a line naming the variable and the value. Lists
and maps are JSON (`RECSERVE_STACK_GATEWAY_EXTRA_PORTS='[50061]'`); booleans
are `true` or `false`. The local runner and the Compose files set the
services' variables; the names are the same in both.
"""


def shared_section(services: list[tuple[str, type[BaseSettings]]]) -> list[str]:
    base = settings_class(*SHARED)
    prefix = str(base.model_config.get("env_prefix", "")).upper()
    lines = [
        "## Every service",
        "",
        f"`{SHARED[0]}.{SHARED[1]}`, the fields every service has; `<SERVICE>` is "
        + ", ".join(
            f"`{str(c.model_config.get('env_prefix', '')).upper()[len(prefix) : -1]}`"
            for _, c in services
        )
        + ".",
        "",
        HEADER,
    ]
    fields = base.model_fields
    for name, info in fields.items():
        variable = env_name(base, name).replace(prefix, f"{prefix}<SERVICE>_", 1)
        default = default_text(base, name, info)
        own = [(title, cls) for title, cls in services if name in own_fields(cls, base)]
        if own:
            default = ", ".join(
                f"{title} {default_text(cls, name, cls.model_fields[name])}" for title, cls in own
            )
        shared = {n: env_name(base, n).replace(prefix, f"{prefix}<SERVICE>_", 1) for n in fields}
        description = with_variables(info.description or "", shared)
        lines.append(row(variable, type_text(info), default, allowed_text(info), description))
    return lines


def class_section(title: str, cls: type[BaseSettings], about: str) -> list[str]:
    base = settings_class(*SHARED)
    fields = own_fields(cls, base) if issubclass(cls, base) else dict(cls.model_fields)
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    lines = [f"## {title[0].upper()}{title[1:]}", ""]
    lines.append(f"`{cls.__module__}.{cls.__name__}`, `{prefix}*`: {about}")
    lines += ["", HEADER]
    variables = {n: env_name(cls, n) for n in cls.model_fields}
    for name, info in fields.items():
        description = with_variables(info.description or "", variables)
        kind, default = type_text(info), default_text(cls, name, info)
        lines.append(row(variables[name], kind, default, allowed_text(info), description))
    return lines


def others_section() -> list[str]:
    lines = ["## Read outside the settings classes", "", "| variable | read by | what it does |"]
    lines.append("|---|---|---|")
    for variable, reader, what in OTHERS:
        names = ", ".join(f"`{v.strip()}`" for v in variable.split(","))
        lines.append(f"| {names} | {reader} | {cell(what)} |")
    return lines


def render() -> str:
    classes = [(title, settings_class(m, c), about) for title, m, c, about in SECTIONS]
    base = settings_class(*SHARED)
    services = [(title, cls) for title, cls, _ in classes if issubclass(cls, base)]
    parts = [INTRO.rstrip("\n"), "\n".join(shared_section(services))]
    parts += ["\n".join(class_section(title, cls, about)) for title, cls, about in classes]
    parts.append("\n".join(others_section()))
    return "\n\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    missing = missing_descriptions()
    if missing:
        print("fields without a description: " + ", ".join(missing), file=sys.stderr)
        return 1
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
