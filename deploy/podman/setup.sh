#!/usr/bin/env bash
# Make this (Debian, root, no systemd) machine able to build and run the lookup image with podman.
# Idempotent: every step checks first and does nothing when already done.
#
#   1. install podman, buildah, runc, debootstrap and catatonit (the init of `podman run --init` and
#      Compose's `init: true`) from Debian (only those missing);
#   2. install deploy/podman/containers.conf as /etc/containers/containers.conf when there is none
#      (runtime runc, default ulimits 20000, cgroupfs, file events logger);
#   3. pick a storage driver: overlay when podman works with it, else vfs (written to storage.conf);
#   4. build the base image $FC_BASE_IMAGE (Debian minbase + python3 + venv) with
#      `debootstrap --variant=minbase` and `podman import`; the rootfs tarball is cached in
#      $FC_CACHE_DIR, so a second machine state (image store wiped) re-imports in seconds.
#
# Usage: deploy/podman/setup.sh            (everything)
#        deploy/podman/setup.sh --no-base  (steps 1-3 only)
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

log() { echo "[podman-setup] $*" >&2; }

build_base=1
[[ "${1:-}" == "--no-base" ]] && build_base=0

if [[ $(id -u) -ne 0 ]]; then
  log "must run as root (rootful podman; debootstrap needs root)"
  exit 2
fi

mkdir -p "$FC_CACHE_DIR"
exec 9>"$FC_CACHE_DIR/setup.lock"
flock 9  # two concurrent runs (CI + a developer) would race on apt and on the import

# --- 1. packages ---------------------------------------------------------------------------------
missing=()
for cmd in podman buildah runc debootstrap; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
# podman looks for its --init binary here (not on PATH): without it, `--init` fails with
# "container-init binary not found on the host"
[[ -x /usr/libexec/podman/catatonit ]] || missing+=(catatonit)
if ((${#missing[@]})); then
  log "installing from Debian: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" ca-certificates >/dev/null
fi

# --- 2. containers.conf ---------------------------------------------------------------------------
if [[ ! -e /etc/containers/containers.conf ]]; then
  install -D -m 0644 "$FC_PODMAN_DIR/containers.conf" /etc/containers/containers.conf
  log "installed /etc/containers/containers.conf"
fi

# --- 3. storage driver ----------------------------------------------------------------------------
if ! podman info >/dev/null 2>&1; then
  log "podman info fails with the default storage; switching to vfs"
  mkdir -p /etc/containers
  printf '[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\ngraphroot = "/var/lib/containers/storage"\n' \
    >/etc/containers/storage.conf
  podman info >/dev/null  # fail loudly if it still does not work
fi
log "podman $(podman version --format '{{.Client.Version}}'), storage $(podman info --format '{{.Store.GraphDriverName}}'), runtime $(podman info --format '{{.Host.OCIRuntime.Name}}')"

# --- 4. base image ----------------------------------------------------------------------------------
((build_base)) || exit 0
if podman image exists "$FC_BASE_IMAGE"; then
  log "base image $FC_BASE_IMAGE present"
  exit 0
fi
tarball="$FC_CACHE_DIR/rootfs-$FC_DEBIAN_SUITE-minbase-python3.tar.gz"
if [[ ! -s "$tarball" ]]; then
  rootfs="$(mktemp -d "$FC_CACHE_DIR/rootfs.XXXXXX")"
  trap 'rm -rf "$rootfs"' EXIT
  log "debootstrap --variant=minbase $FC_DEBIAN_SUITE from $FC_DEBIAN_MIRROR (about a minute)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$FC_DEBIAN_SUITE" "$rootfs" "$FC_DEBIAN_MIRROR" >"$FC_CACHE_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$FC_CACHE_DIR/debootstrap.log" >&2; exit 1; }
  # A slim base: no package lists, downloaded .debs, docs, man pages or translations.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/locale "$rootfs"/var/log/*
  tar --numeric-owner -C "$rootfs" -czf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi
log "importing $tarball as $FC_BASE_IMAGE"
podman import --quiet \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' \
  "$tarball" "$FC_BASE_IMAGE" >/dev/null
podman run --rm "$FC_BASE_IMAGE" python3 -c 'import ensurepip, ssl, venv' ||
  { log "base image $FC_BASE_IMAGE cannot run python3"; exit 1; }
log "base image $FC_BASE_IMAGE ready"
