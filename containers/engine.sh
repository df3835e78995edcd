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

# scdino_gpu_ccache: the compiler cache that the GPU image's compile
# (scripts/build-image.sh --cuda --ccache DIR) and the dependency pack's
# build (tests/deploy/gpu_pack_build_test.sh) share, made if need be;
# prints its directory (SCDINO_GPU_CCACHE_DIR, default
# ~/.cache/scdino/gpu-ccache). Both compile the same sources with the same
# compiler and LibTorch 2.6 at the same paths (/opt/scdino/src,
# /opt/scdino/build), the pack's build with -isystem directories of its
# own: its ccache.conf keys a result on the preprocessed source (which holds
# every header's path and text) and not on the -isystem list, so that a
# translation unit reading no header of the pack's (the precompiled
# LibTorch header among them) is compiled once for both
# (docs/performance.md#the-gpu-images-compile-and-the-packs-one-compiler-cache).
scdino_gpu_ccache() {
  local dir=${SCDINO_GPU_CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/scdino/gpu-ccache}
  mkdir -p "$dir" || return 1
  printf '%s\n' "# scdino_gpu_ccache (containers/engine.sh): shared by the GPU image's compile and the pack's build" \
    "direct_mode = false" "ignore_options = -isystem" > "$dir/ccache.conf"
  echo "$dir"
}
# scdino_ccache_hits: "HITS COMPILES" from `ccache -s` on stdin.
scdino_ccache_hits() {
  sed -n 's/^ *Hits: *\([0-9]*\) *\/ *\([0-9]*\).*/\1 \2/p' | head -1
}

# scdino_background_parent NAME: the engine flag that runs container NAME
# beneath other work (scripts/test.sh's background builds), or nothing.
# --cpu-shares alone weighs a container only against its siblings under
# podman's /libpod_parent, a top-level cgroup at 1024 shares that competes
# with the host's own tasks at full weight (measured: the pack's three
# compilers at 20-28 % of a core each beside the host build's two at 47 %);
# under /scdino-background, at 2 shares, it takes what the rest leaves idle.
# Podman on cgroup v1's cpu controller only (this machine's layout); elsewhere
# --cpu-shares acts alone. scdino_background_parent_remove NAME after it ends.
scdino_background_parent() {
  local cpu=/sys/fs/cgroup/cpu
  [ "$scdino_engine" = podman ] && [ -f "$cpu/cpu.shares" ] || return 0
  { mkdir -p "$cpu/scdino-background" && echo 2 > "$cpu/scdino-background/cpu.shares"; } 2>/dev/null || return 0
  echo "--cgroup-parent=/scdino-background/$1"
}
scdino_background_parent_remove() {
  local d
  # Deepest first: podman leaves conmon's cgroup beside the container's.
  for d in /sys/fs/cgroup/*/scdino-background/"$1"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  return 0
}

# scdino_engine_storage: the directory the engine keeps its images in.
scdino_engine_storage() {
  if [ "$scdino_engine" = podman ]; then
    "$scdino_engine" info --format '{{.Store.GraphRoot}}' 2>/dev/null
  else
    "$scdino_engine" info --format '{{.DockerRootDir}}' 2>/dev/null
  fi
}

# scdino_free_gb DIR: whole GB free on DIR's file system (empty if unknown).
scdino_free_gb() {
  [ -n "$1" ] && [ -d "$1" ] || return 0
  df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }'
}

# scdino_prune_build_leftovers: removes what earlier builds left behind:
# untagged images (a tag moved to a newer build) and, with podman, the
# working containers of killed builds and the cached stages that no tagged
# image descends from any more (a Dockerfile step or its inputs changed
# since). Run it when no build is running (scripts/test.sh does, first). Tagged images and the stages they are
# built on stay, so an unchanged build still comes from the cache (a stage
# that others only copy from must be tagged itself: build-image.sh
# --build-stage tags the GPU image's local packages for this). Each GPU
# image build leaves ~10 GB of such stages, and committing its ~10 GB
# toolchain layer needs about twice that free.
scdino_prune_build_leftovers() {
  local storage before after id keep=" " removed=0
  storage=$(scdino_engine_storage)
  before=$(scdino_free_gb "$storage")
  "$scdino_engine" image prune -f >/dev/null 2>&1 || return 0
  if [ "$scdino_engine" = podman ]; then
    # The working containers of builds that were killed hold their stages
    # (and a half-written layer) in the storage.
    local working
    working=$(podman ps -a --external --format '{{.ID}} {{.Names}}' 2>/dev/null |
              awk '$2 ~ /-working-container(-[0-9]+)?$/ {print $1}')
    [ -z "$working" ] || podman rm -f $working >/dev/null 2>&1 || true
    for id in $(podman images -q --no-trunc --filter dangling=false 2>/dev/null); do
      id=${id#sha256:}
      while [ -n "$id" ] && [[ "$keep" != *" $id "* ]]; do
        keep+="$id "
        id=$(podman image inspect --format '{{.Parent}}' "$id" 2>/dev/null || true)
        id=${id#sha256:}
      done
    done
    # Newest first: a stale stage's children go before it.
    for id in $(podman images -a -q --no-trunc 2>/dev/null); do
      id=${id#sha256:}
      [[ "$keep" == *" $id "* ]] && continue
      podman rmi "$id" >/dev/null 2>&1 && removed=$((removed + 1))
    done
  fi
  after=$(scdino_free_gb "$storage")
  echo "scdino: removed the leftovers of earlier image builds ($removed stale stages): ${before:-?} -> ${after:-?} GB free" \
       "in ${storage:-the image storage}"
}

# scdino_image_exists IMAGE
scdino_image_exists() {
  "$scdino_engine" image inspect "$1" >/dev/null 2>&1
}

# scdino_debian_base IMAGE [SUITE]: makes sure a Debian base image (SUITE
# bookworm, the default, for Debian 12; trixie for Debian 13) is present:
# pulls it, or, where no registry is reachable, builds it with mmdebstrap
# from Debian's mirror (main only, as the official images) and imports it
# under the same name, so the Dockerfiles are the same either way.
scdino_debian_base() {
  local image=$1 suite=${2:-bookworm} tar
  scdino_image_exists "$image" && return 0
  if timeout 120 "$scdino_engine" pull -q "$image" >/dev/null 2>&1; then
    return 0
  fi
  command -v mmdebstrap >/dev/null || {
    echo "scdino: cannot pull $image and mmdebstrap is not installed to make it locally" \
         "(apt-get install mmdebstrap, or make $image available to $scdino_engine)" >&2
    return 1
  }
  local mirror=${SCDINO_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  echo "scdino: $image cannot be pulled; making it with mmdebstrap ($suite) from $mirror" >&2
  tar=$(mktemp "/tmp/scdino-debian-$suite.XXXXXX.tar")
  if ! mmdebstrap --variant=minbase --mode=root --format=tar --quiet "$suite" "$tar" \
        "deb $mirror $suite main" "deb $mirror $suite-updates main" \
        "deb ${mirror%/debian}/debian-security $suite-security main"; then
    rm -f "$tar"
    echo "scdino: mmdebstrap could not make a Debian $suite base from $mirror" >&2
    return 1
  fi
  "$scdino_engine" import --change 'CMD ["/bin/bash"]' "$tar" "$image" >/dev/null
  local rc=$?
  rm -f "$tar"
  return $rc
}

# scdino_enroot_import SQSH IMAGE: `enroot import` of a local image into the
# squashfs SQSH, checked: exit 0 only with a complete, readable squashfs
# holding the services, and no temporary container left behind.
#
# Enroot (3.x to 4.1, src/docker.sh) imports podman:// and dockerd:// images
# through a temporary container `enroot.<random>` that its exit trap removes
# with `docker rm`, whichever engine made it, under `set -e`. On a host with
# podman and no docker, or a docker client without a daemon, that cleanup
# fails: the import exits non-zero after writing a complete file and leaves
# the container behind. A `docker` that runs podman, on enroot's PATH only,
# lets the cleanup do its job.
scdino_enroot_import() {
  local sqsh=$1 image=$2 shim="" rc=0 before after leftover log
  log=$(mktemp /tmp/scdino-enroot.XXXXXX.log)
  before=$("$scdino_engine" ps -a --format '{{.Names}}' 2>/dev/null | grep '^enroot\.' || true)
  local path=$PATH
  if [ "$scdino_engine" = podman ]; then
    shim=$(mktemp -d /tmp/scdino-enroot-shim.XXXXXX)
    printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v podman)" > "$shim/docker"
    chmod 755 "$shim/docker"
    path="$shim:$PATH"
  fi
  PATH=$path enroot import -o "$sqsh" "${scdino_engine/docker/dockerd}://$image" 2>"$log" || rc=$?
  cat "$log" >&2
  [ -z "$shim" ] || rm -rf "$shim"
  after=$("$scdino_engine" ps -a --format '{{.Names}}' 2>/dev/null | grep '^enroot\.' || true)
  leftover=$(comm -13 <(sort <<<"$before") <(sort <<<"$after") | sed '/^$/d')
  if [ -n "$leftover" ]; then
    "$scdino_engine" rm -f -v $leftover >/dev/null 2>&1 || true
    echo "scdino: enroot import left the container(s) $(echo $leftover) behind; removed" >&2
  fi
  if [ "$rc" -ne 0 ]; then
    echo "scdino: 'enroot import -o $sqsh ${scdino_engine/docker/dockerd}://$image' failed (exit $rc): $(tail -3 "$log" | tr '\n' ' ')" >&2
    [ ! -e "$sqsh" ] || { rm -f "$sqsh"; echo "scdino: removed the incomplete $sqsh" >&2; }
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  # Complete and readable: the superblock, and the services where the
  # image puts them.
  local super listing
  if ! super=$(unsquashfs -s "$sqsh" 2>&1) || ! listing=$(unsquashfs -l "$sqsh" /usr/local/bin 2>&1); then
    echo "scdino: $sqsh, written by enroot import, is not a readable squashfs: $(tail -2 <<<"$super$listing")" >&2
    return 1
  fi
  local b
  for b in scdino-trainer scdino-features scdino-eval scdinoctl; do
    grep -q "/usr/local/bin/$b\$" <<<"$listing" || {
      echo "scdino: $sqsh lacks /usr/local/bin/$b; it is not an scdino image" >&2; return 1; }
  done
  echo "scdino: $sqsh: $(stat -c %s "$sqsh") bytes, $(grep -o 'Number of inodes [0-9]*' <<<"$super" | sed 's/Number of //');" \
       "/usr/local/bin: $(grep -o '/usr/local/bin/[^/]*$' <<<"$listing" | sed 's|/usr/local/bin/||' | tr '\n' ' ')"
}
