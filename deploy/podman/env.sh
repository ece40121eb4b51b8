# Sourced by the podman scripts and the container test: one place for names and config paths.
# shellcheck shell=bash
FC_PODMAN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FC_REPO="$(cd "$FC_PODMAN_DIR/../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$FC_PODMAN_DIR/containers.conf}"
FC_DEBIAN_SUITE="${FC_DEBIAN_SUITE:-bookworm}"
FC_DEBIAN_MIRROR="${FC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
FC_BASE_IMAGE="${FC_BASE_IMAGE:-localhost/featurecache-base:$FC_DEBIAN_SUITE}"
FC_LOOKUP_IMAGE="${FC_LOOKUP_IMAGE:-localhost/featurecache-lookup:dev}"
FC_CACHE_DIR="${FC_CACHE_DIR:-/var/cache/featurecache}"
