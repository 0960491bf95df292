#!/usr/bin/env bash
# Pin every base image in the Dockerfiles and Compose files to its digest:
# `name:tag` becomes `name:tag@sha256:...`, resolved from the registry now.
# Needs `docker buildx` and registry access (these development machines have
# neither, so the committed files pin exact version tags; run this where you
# build images, review the diff, commit it).
set -euo pipefail
cd "$(dirname "$0")/.."
files=(infra/docker/*.Dockerfile infra/envoy/Dockerfile infra/triton/*.Dockerfile compose*.yaml)
images=$(grep -hoE '(=|image: |FROM )[a-z0-9./-]+:[A-Za-z0-9._-]+' "${files[@]}" \
  | sed -E 's/^(=|image: |FROM )//' | grep -v '\$' | grep -v '^recserve/' | sort -u)
for image in $images; do
  digest=$(docker buildx imagetools inspect "$image" --format '{{json .Manifest.Digest}}' | tr -d '"')
  echo "$image -> $digest"
  sed -i -E "s#${image}(@sha256:[0-9a-f]+)?([^0-9A-Za-z._-]|\$)#${image}@${digest}\\2#g" "${files[@]}"
done
