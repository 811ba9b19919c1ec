#!/usr/bin/env bash
# Builds the `loadfleet` container image FROM scratch: the three binaries and
# exactly the shared libraries they load (found with ldd), nothing else — no
# base image is needed, so it builds where no registry can be reached.
#
# Usage: deploy/container/build.sh [BIN_DIR] [TAG]
#   BIN_DIR  folder holding loadfleet-{coordinator,agent,testbed}
#            (default: target/release, built first if missing)
#   TAG      image tag (default: loadfleet:latest)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:-target/release}
TAG=${2:-loadfleet:latest}
BINS=(loadfleet-coordinator loadfleet-agent loadfleet-testbed)

if [[ ! -x "$BIN_DIR/loadfleet-agent" ]]; then
    cargo build --release --workspace --bins
fi

CTX=$(mktemp -d)
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/rootfs/usr/local/bin" "$CTX/rootfs/tmp" "$CTX/rootfs/out" "$CTX/rootfs/etc"
for b in "${BINS[@]}"; do
    cp "$BIN_DIR/$b" "$CTX/rootfs/usr/local/bin/"
    # Every library the binary loads, at the same path inside the image.
    for lib in $(ldd "$BIN_DIR/$b" | grep -o '/[^ ]*' | sort -u); do
        mkdir -p "$CTX/rootfs$(dirname "$lib")"
        cp -L "$lib" "$CTX/rootfs$lib"
    done
done
# Name resolution through /etc/hosts and DNS (Docker mounts both files).
printf 'hosts: files dns\n' > "$CTX/rootfs/etc/nsswitch.conf"
cp deploy/container/Dockerfile "$CTX/Dockerfile"
docker build -q -t "$TAG" "$CTX"
