"""Generates the client's gRPC stubs (.py, .pyi, _grpc.py) for the public API
from the repository's protos/ into a package folder, with imports rewritten
to live inside ``recserve_client._proto``. setup.py runs it while a wheel is
built; ``python build_stubs.py DIR`` runs it by hand.

The stubs register their messages in a descriptor pool of their own, not in
protobuf's default one, and without the HTTP annotations (only Envoy's
transcoder reads those): a process that also holds another build of the same
protos (an app with the server's stubs, a test suite) can import both, where
two different copies of one file in the default pool refuse to load."""

from __future__ import annotations

import re
import sys
import tempfile
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTOS = REPO / "protos"
API = "recserve/recommend/v1/recommend.proto"
PACKAGE = "recserve_client._proto"
HTTP_IMPORT = re.compile(r'^import "google/api/annotations\.proto";\n', re.MULTILINE)
HTTP_OPTION = re.compile(r"\{\s*option \(google\.api\.http\) = \{[^}]*\};\s*\}")


def without_http_annotations(text: str) -> str:
    text = HTTP_OPTION.sub("{}", HTTP_IMPORT.sub("", text))
    if "google.api" in text:
        raise SystemExit(f"{API}: an HTTP annotation this script does not know how to drop")
    return text


def generate(out: Path) -> list[Path]:
    """Writes recommend_pb2{,.pyi,_grpc}.py and __init__.py into ``out``."""
    from grpc_tools import protoc

    if not (PROTOS / API).is_file():
        raise SystemExit(f"{PROTOS / API} not found: build the wheel from the repository")
    includes = Path(str(resources.files("grpc_tools"))) / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as protos:
        source_proto = Path(protos) / API
        source_proto.parent.mkdir(parents=True)
        source_proto.write_text(without_http_annotations((PROTOS / API).read_text()))
        args = [
            "protoc",
            f"-I{protos}",
            f"-I{includes}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            API,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        written = []
        for source in sorted((Path(tmp) / Path(API).parent).iterdir()):
            text = re.sub(
                r"^from recserve\.recommend\.v1 import ",
                f"from {PACKAGE} import ",
                source.read_text(),
                flags=re.MULTILINE,
            )
            text = text.replace("_descriptor_pool.Default()", "_POOL")
            own_pool = "\n_POOL = _descriptor_pool.DescriptorPool()\n_sym_db = "
            text = text.replace("\n_sym_db = ", own_pool)
            target = out / source.name
            target.write_text(text)
            written.append(target)
    init = out / "__init__.py"
    init.write_text('"""Generated from protos/recserve/recommend/v1 at build time."""\n')
    return [init, *written]


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1])):
        print(path)
