#!/usr/bin/env bash
# Build the lookup image (deploy/Dockerfile) with podman, on the debootstrap base image.
# Layers are cached by podman: a second build with unchanged pyproject.toml reuses the dependency
# layer and only re-installs the package (seconds).
#
# Usage: deploy/podman/build_image.sh [TAG]        (default $FC_LOOKUP_IMAGE)
#   FC_BASE_IMAGE   base image passed as BASE_IMAGE (default: the one setup.sh builds)
#   FC_PIP_CA       CA bundle handed to pip as a build secret (default: the host's system bundle;
#                   needed behind a TLS-intercepting proxy, harmless otherwise)
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

tag="${1:-$FC_LOOKUP_IMAGE}"
if ! podman image exists "$FC_BASE_IMAGE"; then
  echo "[build-image] base image $FC_BASE_IMAGE missing: run deploy/podman/setup.sh first" >&2
  exit 2
fi

secret=()
ca="${FC_PIP_CA:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}"
[[ -s "$ca" ]] && secret=(--secret "id=pip_ca,src=$ca")

start=$(date +%s)
# --format docker keeps HEALTHCHECK (the OCI image format has no field for it).
podman build \
  --format docker \
  --file "$FC_REPO/deploy/Dockerfile" \
  --build-arg "BASE_IMAGE=$FC_BASE_IMAGE" \
  "${secret[@]}" \
  --tag "$tag" \
  --layers \
  "$FC_REPO"
echo "[build-image] built $tag in $(($(date +%s) - start)) s;" \
  "size $(podman image inspect --format '{{.Size}}' "$tag") bytes" >&2
