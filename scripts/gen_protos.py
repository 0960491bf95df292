"""Generate Python stubs (.py, .pyi, _grpc.py) and Envoy's descriptor set
(for gRPC-JSON transcoding) from protos/. The google/api protos come from
third_party/ (see its README); their Python modules come from the
googleapis-common-protos wheel, so no stubs are generated for them."""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"
OUT = ROOT / "gen" / "python"
THIRD_PARTY = ROOT / "third_party" / "googleapis"
DESCRIPTOR_SET = ROOT / "build" / "recserve.pb"


def main() -> int:
    grpc_includes = Path(str(resources.files("grpc_tools"))) / "_proto"
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    DESCRIPTOR_SET.parent.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{THIRD_PARTY}",
        f"-I{grpc_includes}",
        f"--python_out={OUT}",
        f"--pyi_out={OUT}",
        f"--grpc_python_out={OUT}",
        f"--descriptor_set_out={DESCRIPTOR_SET}",
        "--include_imports",
        *sources,
    ]
    code = protoc.main(args)
    if code != 0:
        print("protoc failed", file=sys.stderr)
        return int(code)
    print(f"generated {len(sources)} protos into {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
