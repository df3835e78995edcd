# Sourced by scripts/build-image.sh and the container tests: the container
# engine of this machine and the flags it needs here.
#
#   source containers/engine.sh
#   scdino_engine_init            # sets scdino_engine and scdino_engine_flags
#   "$scdino_engine" run "${scdino_engine_flags[@]}" IMAGE CMD...

# scdino_engine_init: picks podman (no daemon needed) or, if absent, a docker
# whose daemon answers. Fails naming what to install.
scdino_engine_init() {
  scdino_engine_flags=()
  if [ -n "${SCDINO_ENGINE:-}" ]; then
    scdino_engine=$SCDINO_ENGINE
  elif command -v podman >/dev/null; then
    scdino_engine=podman
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    scdino_engine=docker
  else
    echo "scdino: no container engine: install podman (Debian/Ubuntu: apt-get install podman;" \
         "it needs no daemon) or Docker with a running daemon (the docker client alone is not enough)" >&2
    return 1
  fi
  command -v "$scdino_engine" >/dev/null ||
    { echo "scdino: SCDINO_ENGINE=$scdino_engine is not on PATH" >&2; return 1; }
  if [ "$scdino_engine" = podman ]; then
    # podman asks runc to set RLIMIT_NOFILE and RLIMIT_NPROC of every
    # container above this shell's hard limits; where root lacks
    # CAP_SYS_RESOURCE (some VMs and nested containers) runc then fails with
    # "error setting rlimit type 6/7: operation not permitted". Ask for what
    # the shell may set instead.
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [ "$nofile" = unlimited ] && nofile=1048576
    [ "$nproc" = unlimited ] || [ "$nproc" -gt 8192 ] && nproc=8192
    scdino_engine_flags=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  fi
}

# scdino_image_exists IMAGE
scdino_image_exists() {
  "$scdino_engine" image inspect "$1" >/dev/null 2>&1
}

# scdino_debian_base IMAGE: makes sure the Debian 12 base image is present:
# pulls it, or, where no registry is reachable, builds it with mmdebstrap
# from Debian's mirror and imports it under the same name.
scdino_debian_base() {
  local image=$1 tar
  scdino_image_exists "$image" && return 0
  if timeout 120 "$scdino_engine" pull -q "$image" >/dev/null 2>&1; then
    return 0
  fi
  command -v mmdebstrap >/dev/null || {
    echo "scdino: cannot pull $image and mmdebstrap is not installed to make it locally" \
         "(apt-get install mmdebstrap, or make $image available to $scdino_engine)" >&2
    return 1
  }
  echo "scdino: $image cannot be pulled; making it with mmdebstrap from ${SCDINO_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
  tar=$(mktemp /tmp/scdino-debian12.XXXXXX.tar)
  local mirror=${SCDINO_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  if ! mmdebstrap --variant=minbase --mode=root --format=tar --quiet bookworm "$tar" \
        "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
        "deb ${mirror%/debian}/debian-security bookworm-security main"; then
    rm -f "$tar"
    echo "scdino: mmdebstrap could not make a Debian 12 base from $mirror" >&2
    return 1
  fi
  "$scdino_engine" import --change 'CMD ["/bin/bash"]' "$tar" "$image" >/dev/null
  local rc=$?
  rm -f "$tar"
  return $rc
}
