#!/usr/bin/env bash
# Give this machine what image-backed `local` sandboxes need: Buildah (daemonless; builds
# each task's environment/Dockerfile, rootless as the user crucible-build, in a network
# namespace of its own) and crucible's Debian base image in Buildah's storage; and what
# every `local` sandbox with network needs: slirp4netns (its user-mode route out, from
# its own network namespace) and iproute2 (`ip`, for the routes it sets there).
#
# Idempotent and quiet: installs buildah from Debian if it is missing, and imports
# debian:bookworm-slim from the debootstrap tarball that setup-docker.sh caches, else from a
# Docker engine that has it, else from a fresh debootstrap (cached the same way), because
# no image registry can be reached. Runs as root (or through sudo) with no stdin;
# scripts/test.sh calls it, and so does the README's first command.
#
# Environment: CRUCIBLE_DEBIAN_MIRROR (default: the mirror apt uses here, as setup-docker.sh finds it),
# CRUCIBLE_CACHE_DIR (default /var/cache/crucible), CRUCIBLE_LOG_DIR
# (default /var/log/crucible).
set -euo pipefail


export DEBIAN_FRONTEND=noninteractive
SUITE=bookworm
CACHE_DIR=${CRUCIBLE_CACHE_DIR:-/var/cache/crucible}
LOG_DIR=${CRUCIBLE_LOG_DIR:-/var/log/crucible}
TARBALL="$CACHE_DIR/$SUITE-minbase.tar"
IMAGE=debian:bookworm-slim
BASE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

SETUP_NAME=setup-images
# shellcheck source=scripts/lib-setup.sh
source "$(dirname "$0")/lib-setup.sh"

# The base image's root filesystem as a tarball, made with debootstrap once per machine.
ensure_base_tarball() {
    [ -s "$TARBALL" ] && return 0
    command -v debootstrap >/dev/null 2>&1 || { say "installing debootstrap"; apt_install debootstrap; }
    # The mirror comes from this machine's apt configuration only (setup-docker.sh reads it,
    # or CRUCIBLE_DEBIAN_MIRROR names one); with none, stop and say so.
    local mirror
    mirror=$(bash "$(dirname "$0")/setup-docker.sh" --mirror) \
        || die "no Debian mirror in this machine's apt sources; set CRUCIBLE_DEBIAN_MIRROR=URL"
    say "debootstrap $SUITE from $mirror (a few minutes, once per machine)"
    $SUDO mkdir -p "$CACHE_DIR" "$LOG_DIR"
    local root
    root=$(mktemp -d /tmp/crucible-rootfs.XXXXXX)
    trap '$SUDO rm -rf "$root" "$TARBALL.tmp"' EXIT
    $SUDO debootstrap --variant=minbase "$SUITE" "$root" "$mirror" \
        >"$LOG_DIR/debootstrap.log" 2>&1 \
        || { tail -n 30 "$LOG_DIR/debootstrap.log" >&2; die "debootstrap failed"; }
    # Leave out the apt caches to keep the image small.
    $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    $SUDO tar -C "$root" --numeric-owner -cf "$TARBALL.tmp" .
    $SUDO mv "$TARBALL.tmp" "$TARBALL"
    $SUDO rm -rf "$root"
    trap - EXIT
}

# 0. The route out of a local sandbox with network (crucible/sandboxes/local/usernet.py).
missing_net=()
command -v slirp4netns >/dev/null 2>&1 || missing_net+=(slirp4netns)
command -v ip >/dev/null 2>&1 || missing_net+=(iproute2)
if [ "${#missing_net[@]}" != 0 ]; then
    say "installing ${missing_net[*]}"
    apt_install "${missing_net[@]}"
fi

# 1. The tool (rootless Buildah also needs newuidmap, from uidmap).
if ! command -v buildah >/dev/null 2>&1; then
    say "installing buildah"
    if [ -n "$SUDO" ]; then apt_install buildah uidmap; else apt_install buildah; fi
fi
command -v buildah >/dev/null 2>&1 || die "no buildah after install"

# 1b. The grading kit (src/crucible/sandboxes/gradekit.py): static bash and busybox that
# image-mode and docker grading run by absolute path, never the image's own.
if [ ! -x /bin/bash-static ] || [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
    say "installing bash-static and busybox-static (the grading kit)"
    apt_install bash-static busybox-static
fi

# 1c. What isolated builds need (src/crucible/sandboxes/local/buildiso.py): an OCI runtime,
# newuidmap for rootless Buildah's user namespace (slirp4netns, for a build with network, is
# step 0's).
need=()
command -v runc >/dev/null 2>&1 || command -v crun >/dev/null 2>&1 || need+=(crun)
command -v newuidmap >/dev/null 2>&1 || need+=(uidmap)
if [ "${#need[@]}" -gt 0 ]; then say "installing ${need[*]}"; apt_install "${need[@]}"; fi

# 1d. The unprivileged user crucible (run as root) builds task images as
# (src/crucible/sandboxes/local/builduser.py), with 64 Ki subordinate ids of its own from
# 0x18000000 (buildiso.BUILD_UID_BASE): a build step's root is that user, never the host's.
BUILD_USER=crucible-build
BUILD_HOME=/var/lib/crucible/build
BUILD_IDS=402653184:65536
if ! id -u "$BUILD_USER" >/dev/null 2>&1; then
    say "adding the build user $BUILD_USER"
    $SUDO useradd --system --user-group --no-create-home --home-dir "$BUILD_HOME" \
        --shell /usr/sbin/nologin "$BUILD_USER"
fi
$SUDO mkdir -p "$BUILD_HOME"
$SUDO chown "$BUILD_USER:$BUILD_USER" "$BUILD_HOME"
$SUDO chmod 700 "$BUILD_HOME"
for table in /etc/subuid /etc/subgid; do
    if ! $SUDO grep -qs "^$BUILD_USER:" "$table"; then
        echo "$BUILD_USER:$BUILD_IDS" | $SUDO tee -a "$table" >/dev/null
    fi
done

# 2. The base image, under the name Dockerfiles use (FROM debian:bookworm-slim), in the
# storage of the user who runs crucible (this script's user: not through sudo).
docker_has_base() {
    command -v docker >/dev/null 2>&1 && timeout 10 docker image inspect "$IMAGE" >/dev/null 2>&1
}
if ! buildah inspect --type image "$IMAGE" >/dev/null 2>&1 && [ ! -s "$TARBALL" ] && docker_has_base; then
    say "importing $IMAGE into buildah from the Docker engine"
    buildah pull --quiet "docker-daemon:$IMAGE" >/dev/null || say "that failed; trying the tarball"
fi
if ! buildah inspect --type image "$IMAGE" >/dev/null 2>&1; then
    ensure_base_tarball
    say "importing $IMAGE into buildah from $TARBALL"
    ctr=$(buildah from scratch)
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    buildah add --quiet "$ctr" "$TARBALL" / >/dev/null
    buildah config --env "PATH=$BASE_PATH" --cmd bash "$ctr"
    buildah commit --quiet --rm "$ctr" "docker.io/library/$IMAGE" >/dev/null
    trap - EXIT
fi
buildah inspect --type image "$IMAGE" >/dev/null 2>&1 || die "buildah has no $IMAGE after import"
exit 0
