"""Validates rendered manifests against Kubernetes' own schemas, strictly.

    .venv-k8s/bin/python tests/kubernetes/validate_schemas.py VERSION FILE...

Run in .venv-k8s (kubernetes-validate, outside requirements/main.txt) by
test_manifests.py. Prints one JSON line: {"FILE": [errors]}, where each error
names the object, the Kubernetes version and what is wrong; exit 0 always
when it ran. Strict: unknown fields are errors, and through the Python API a
kind or API version the version does not serve raises (the command line only
warns).
"""

import json
import sys

import kubernetes_validate
import yaml


def errors_in(path: str, version: str) -> list[str]:
    found = []
    with open(path) as stream:
        documents = [d for d in yaml.safe_load_all(stream) if d]
    for document in documents:
        name = f"{document.get('kind')}/{document.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(p) for p in error.path)
            found.append(f"{name} @ {version}: {where}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError as error:
            found.append(f"{name} @ {version}: {error.message}")
    if not documents:
        found.append(f"{path}: no objects")
    return found


def main(argv: list[str]) -> int:
    version, paths = argv[0], argv[1:]
    print(json.dumps({path: errors_in(path, version) for path in paths}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
