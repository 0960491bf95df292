"""Generates the client's gRPC stubs (.py, .pyi, _grpc.py) for the public API
from the repository's protos/ into a package folder, with imports rewritten
to live inside ``recserve_client._proto``. setup.py runs it while a wheel is
built; ``python build_stubs.py DIR`` runs it by hand.

The stubs register their messages in a descriptor pool of their own (one
for the package, ``recserve_client._proto.POOL``), not in protobuf's default
one, and without the HTTP annotations (only Envoy's transcoder reads those):
a process that also holds another build of the same protos (an app with the
server's stubs, a test suite) can import both, where two different copies
of one file in the default pool refuse to load. A file of the API may import
another file of the API (it is found in the package's pool) but nothing
else: a dependency that only the default pool holds would not be found."""

from __future__ import annotations

import re
import sys
import tempfile
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTOS = REPO / "protos"
FOLDER = "recserve/recommend/v1"
APIS = (f"{FOLDER}/recommend.proto", f"{FOLDER}/events.proto")
PACKAGE = "recserve_client._proto"
HTTP_IMPORT = re.compile(r'^import "google/api/annotations\.proto";\n', re.MULTILINE)
HTTP_OPTION = re.compile(r"\{\s*option \(google\.api\.http\) = \{[^}]*\};\s*\}")
IMPORT = re.compile(r'^import\s+(?:public\s+|weak\s+)?"([^"]+)";', re.MULTILINE)
INIT = f'''"""Generated from protos/{FOLDER} at build time."""

from google.protobuf import descriptor_pool

# Every file of the package registers here, not in protobuf's default pool.
POOL = descriptor_pool.DescriptorPool()
'''


def without_http_annotations(text: str, name: str) -> str:
    text = HTTP_OPTION.sub("{}", HTTP_IMPORT.sub("", text))
    if "google.api" in text:
        raise SystemExit(f"{name}: an HTTP annotation this script does not know how to drop")
    foreign = sorted(set(IMPORT.findall(text)) - set(APIS))
    if foreign:
        raise SystemExit(f"{name}: imports {foreign}, which the package's own pool would lack")
    return text


def rewritten(text: str) -> str:
    """Imports of the API's modules from the package; the package's pool."""
    module = re.escape(FOLDER.replace("/", "."))
    text = re.sub(rf"^from {module} import ", f"from {PACKAGE} import ", text, flags=re.MULTILINE)
    own_pool = f"\nfrom {PACKAGE} import POOL as _POOL\n_sym_db = "
    return text.replace("_descriptor_pool.Default()", "_POOL").replace("\n_sym_db = ", own_pool)


def generate(out: Path) -> list[Path]:
    """Writes <api>_pb2{,.pyi,_grpc}.py for each of APIS, and __init__.py, into ``out``."""
    from grpc_tools import protoc

    for api in APIS:
        if not (PROTOS / api).is_file():
            raise SystemExit(f"{PROTOS / api} not found: build the wheel from the repository")
    includes = Path(str(resources.files("grpc_tools"))) / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as protos:
        (Path(protos) / FOLDER).mkdir(parents=True)
        for api in APIS:
            text = without_http_annotations((PROTOS / api).read_text(), api)
            (Path(protos) / api).write_text(text)
        args = [
            "protoc",
            f"-I{protos}",
            f"-I{includes}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *APIS,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        written = []
        for source in sorted((Path(tmp) / FOLDER).iterdir()):
            target = out / source.name
            target.write_text(rewritten(source.read_text()))
            written.append(target)
    init = out / "__init__.py"
    init.write_text(INIT)
    return [init, *written]


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1])):
        print(path)
