#!/usr/bin/env bash
# Builds the scdino container image with podman (no daemon needed) or docker,
# and optionally imports it into an Enroot squashfs for
# `srun --container-image=FILE` (Pyxis) or unpacks it into an OCI bundle for
# Slurm's own `srun --container=DIR`. docs/containers.md has the recipe.
#
#   scripts/build-image.sh                               # scdino:cpu, compiled in the image
#   scripts/build-image.sh --sqsh /shared/images/scdino-cpu.sqsh
#   scripts/build-image.sh --cuda --sqsh /shared/images/scdino-cuda.sqsh   # Debian 13, LibTorch 2.6 CUDA
#   scripts/build-image.sh --cuda --cudnn archive=cudnn-linux-x86_64-9.1.0.70_cuda12-archive.tar.xz
#   scripts/build-image.sh --cuda-ngc --tag scdino:cuda  # the same on NVIDIA's NGC PyTorch base
#   scripts/build-image.sh --prebuilt build              # reuse a Debian 12 host build
#   scripts/build-image.sh --oci-bundle /shared/bundles/scdino --mounts /shared
#
# --cudnn (GPU image from Debian): stub (default; a stand-in that lets
# LibTorch load: the services switch cuDNN off and the model calls none, so
# the image trains on any NVIDIA GPU with nothing fetched from NVIDIA),
# download (Debian's nvidia-cudnn fetches cuDNN from NVIDIA's site) or
# archive=FILE (NVIDIA's cuDNN 9 archive for CUDA 12). --build-stage TAG also
# tags the GPU image's compiling stage (toolchain, build tree and tests) as
# TAG, and its bare toolchain (no -dev package of scdino's) as TAG-toolchain.
# --ccache DIR (GPU image from Debian, podman): its compile uses the compiler
# cache in DIR, bind-mounted, instead of the build's own cache mount
# (scripts/test.sh shares one with the dependency pack's build:
# scdino_gpu_ccache in containers/engine.sh).
# Debian's bases are pulled, or, where no registry is reachable, made
# locally with mmdebstrap and imported under the same name (containers/engine.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
image=cpu tag="" sqsh="" prebuilt="" bundle="" mounts=${SCDINO_CONTAINER_MOUNTS:-} cudnn=stub build_stage="" ccache_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --cuda) image=cuda ;;
    --cuda-ngc) image=cuda-ngc ;;
    --cudnn) cudnn=${2:?--cudnn needs stub, download or archive=FILE}; shift ;;
    --cudnn=*) cudnn=${1#*=} ;;
    --build-stage) build_stage=${2:?--build-stage needs a tag}; shift ;;
    --build-stage=*) build_stage=${1#*=} ;;
    --ccache) ccache_dir=${2:?--ccache needs a directory}; shift ;;
    --ccache=*) ccache_dir=${1#*=} ;;
    --tag) tag=${2:?--tag needs a value}; shift ;;
    --tag=*) tag=${1#*=} ;;
    --sqsh) sqsh=${2:?--sqsh needs a file}; shift ;;
    --sqsh=*) sqsh=${1#*=} ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs a build directory}; shift ;;
    --prebuilt=*) prebuilt=${1#*=} ;;
    --oci-bundle) bundle=${2:?--oci-bundle needs a directory}; shift ;;
    --oci-bundle=*) bundle=${1#*=} ;;
    --mounts) mounts=${2:?--mounts needs SRC[:DST[:ro]],...}; shift ;;
    --mounts=*) mounts=${1#*=} ;;
    -h|--help) usage; exit 0 ;;
    *) echo "scdino: build-image.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

cudnn_dir=""
case $image in
  cpu) dockerfile=containers/Dockerfile; tag=${tag:-scdino:cpu} ;;
  cuda)
    dockerfile=containers/Dockerfile.cuda
    tag=${tag:-scdino:cuda}
    case $cudnn in
      stub|download) ;;
      archive=*)
        archive=${cudnn#archive=}
        [ -f "$archive" ] && [ -r "$archive" ] ||
          { echo "scdino: --cudnn $cudnn: no readable cuDNN archive $archive" >&2; exit 2; }
        cudnn_dir=$(cd "$(dirname "$archive")" && pwd)
        cudnn_file=$(basename "$archive") ;;
      *) echo "scdino: --cudnn $cudnn: expected stub, download or archive=FILE" >&2; exit 2 ;;
    esac ;;
  cuda-ngc) dockerfile=containers/Dockerfile.cuda-ngc; tag=${tag:-scdino:cuda-ngc} ;;
esac
[ "$image" = cuda ] || [ "$cudnn" = stub ] || { echo "scdino: --cudnn is for --cuda (the Debian GPU image)" >&2; exit 2; }
[ "$image" = cuda ] || [ -z "$build_stage" ] || { echo "scdino: --build-stage is for --cuda (the Debian GPU image)" >&2; exit 2; }
[ "$image" = cuda ] || [ -z "$ccache_dir" ] || { echo "scdino: --ccache is for --cuda (the Debian GPU image)" >&2; exit 2; }
[ -z "$ccache_dir" ] || [ -d "$ccache_dir" ] || { echo "scdino: --ccache $ccache_dir: no such directory" >&2; exit 2; }
[ "$image" = cpu ] || [ -z "$prebuilt" ] || { echo "scdino: --prebuilt is for the CPU image (a Debian 12 host build)" >&2; exit 2; }
# podman resolves short names only through registries.conf: name the
# image fully so that it is found again without a registry.
case $tag in */*) ;; *) tag=localhost/$tag ;; esac
if [ -n "$prebuilt" ] && [ ! -f "$prebuilt/CMakeCache.txt" ]; then
  echo "scdino: --prebuilt $prebuilt is not a CMake build directory (no CMakeCache.txt)" >&2
  exit 2
fi

# shellcheck source=../containers/engine.sh
source containers/engine.sh
scdino_engine_init

if [ -n "$sqsh" ]; then
  command -v enroot >/dev/null || {
    echo "scdino: --sqsh $sqsh needs enroot on this machine (https://github.com/NVIDIA/enroot," \
         "packages for Debian/Ubuntu and RHEL); it is not installed. Build without --sqsh and run" \
         "'enroot import -o $sqsh ${scdino_engine/docker/dockerd}://$tag' where enroot is" >&2
    exit 2
  }
  [ -d "$(dirname "$sqsh")" ] || { echo "scdino: --sqsh: directory $(dirname "$sqsh") does not exist" >&2; exit 2; }
  [ ! -e "$sqsh" ] || { echo "scdino: --sqsh: $sqsh exists; remove it first (enroot does not overwrite)" >&2; exit 2; }
  command -v unsquashfs >/dev/null || {
    echo "scdino: --sqsh needs unsquashfs to check the imported file (squashfs-tools, which enroot also needs)" >&2
    exit 2; }
fi
case $image in
  cpu) scdino_debian_base docker.io/library/debian:12 bookworm ;;
  cuda) scdino_debian_base docker.io/library/debian:trixie trixie ;;
esac

version=$(sed -n 's/^project(scdino VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[ "$revision" = unknown ] || git diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"
source_url=$(git remote get-url origin 2>/dev/null || echo "https://github.com/scdino/scdino")

# The labels also from the command line: buildah (podman 4) reuses a cached
# LABEL step whose ARG values changed, so an image built after an earlier
# commit's would carry that commit's revision; --label is applied to the
# image as built. The Dockerfile's own LABEL serves a plain `podman build`.
args=(build "${scdino_engine_flags[@]}" -f "$dockerfile" -t "$tag"
      --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source_url"
      --label "org.opencontainers.image.version=$version" --label "org.opencontainers.image.revision=$revision"
      --label "org.opencontainers.image.source=$source_url")
[ "$scdino_engine" = podman ] && args+=(--network host)
# SCDINO_IMAGE_CPU_SHARES: the build's CPU weight (cgroup cpu shares; 1024 is
# everyone's). A build in the background of other work (scripts/test.sh sets
# 2) then takes only what that work leaves idle: its steps run in a cgroup of
# their own, out of reach of nice.
[ -z "${SCDINO_IMAGE_CPU_SHARES:-}" ] || args+=(--cpu-shares "$SCDINO_IMAGE_CPU_SHARES")

stage=""
cleanup() { [ -z "$stage" ] || rm -rf "$stage"; }
trap cleanup EXIT
if [ "$image" = cuda ]; then
  # Where cuDNN comes from (containers/cuda/local-packages.sh); the build
  # context `cudnn` holds the archive, or nothing.
  stage=$(mktemp -d /tmp/scdino-image.XXXXXX)
  mkdir -p "$stage/empty"
  args+=(--build-arg "CUDNN=${cudnn%%=*}" --label "org.scdino.cudnn=${cudnn%%=*}"
         --build-context "cudnn=${cudnn_dir:-$stage/empty}")
  [ -z "$cudnn_dir" ] || args+=(--build-arg "CUDNN_ARCHIVE=$cudnn_file")
  if [ -n "$ccache_dir" ]; then
    # A bind mount for every RUN step (podman's --volume; docker's build has
    # none), and the compile's CCACHE_DIR there (an ARG of that stage).
    [ "$scdino_engine" = podman ] ||
      { echo "scdino: --ccache needs podman (docker build mounts no host directory); build without it" >&2; exit 2; }
    args+=(--volume "$(cd "$ccache_dir" && pwd):/var/cache/scdino-ccache" --build-arg CCACHE_DIR=/var/cache/scdino-ccache)
  fi
fi
if [ -n "$prebuilt" ]; then
  # The `binaries` stage of the Dockerfile is replaced by this build's
  # install tree: the host is Debian 12 like the image, so the binaries load
  # the same libraries.
  . /etc/os-release
  [ "${ID:-}:${VERSION_ID:-}" = debian:12 ] ||
    { echo "scdino: --prebuilt needs a Debian 12 host (the image's base); this is ${PRETTY_NAME:-unknown}" >&2; exit 2; }
  stage=$(mktemp -d /tmp/scdino-image.XXXXXX)
  cmake --install "$prebuilt" --prefix "$stage/opt/scdino" >/dev/null
  strip --strip-unneeded "$stage"/opt/scdino/bin/scdino-{trainer,features,eval,preflight,synth,stats,config,export} "$stage/opt/scdino/bin/scdinoctl"
  containers/runtime-packages.sh "$stage/opt/scdino" > "$stage/opt/scdino/share/scdino/runtime-packages.txt"
  args+=(--build-context "binaries=$stage")
fi

# oci_config IMAGE MOUNTS: an OCI runtime config.json (runtime-spec 1.0)
# for runc: the image's environment, the usual /proc, /dev and /sys, the
# bind mounts SRC[:DST[:ro]],... of MOUNTS, the host's network.
oci_config() {
  local env mounts="" m src dst opt
  env=$("$scdino_engine" image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$1" |
        sed '/^$/d; s/\\/\\\\/g; s/"/\\"/g; s/.*/      "&",/' | sed '$ s/,$//')
  IFS=, read -r -a list <<<"$2"
  for m in "${list[@]}"; do
    [ -n "$m" ] || continue
    IFS=: read -r src dst opt <<<"$m"
    dst=${dst:-$src}
    [ -e "$src" ] || { echo "scdino: --mounts: $src does not exist" >&2; exit 2; }
    mounts+=$(printf ',\n    {"destination": "%s", "type": "bind", "source": "%s", "options": ["rbind", "%s"]}' \
              "$dst" "$(realpath "$src")" "${opt:-rw}")
  done
  cat <<JSON
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["scdino-trainer", "--help"],
    "env": [
$env
    ],
    "cwd": "/",
    "capabilities": {
      "bounding": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE"],
      "effective": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE"],
      "permitted": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE"]
    },
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": false},
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=1g"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/etc/resolv.conf", "type": "bind", "source": "/etc/resolv.conf", "options": ["rbind", "ro"]},
    {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["rbind", "ro"]}$mounts
  ],
  "linux": {
    "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}],
    "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
  }
}
JSON
}

# A cold build needs room for its stages: the GPU image's compiling stage
# alone is ~10 GB (CUDA toolkit, LibTorch 2.6, the build tree).
case $image in cpu) need_gb=6 ;; *) need_gb=25 ;; esac
storage=$(scdino_engine_storage)
free_gb=$(scdino_free_gb "$storage")
if [ -n "$free_gb" ] && [ "$free_gb" -lt "$need_gb" ]; then
  echo "scdino: warning: $free_gb GB free in $storage; a cold build of $tag needs about $need_gb GB" \
       "(less where its stages are in the build cache). Untagged images of earlier builds: '$scdino_engine image prune'" >&2
fi
start=$(date +%s)
[ -z "$build_stage" ] || case $build_stage in */*) ;; *) build_stage=localhost/$build_stage ;; esac
# tag_stage TARGET NAME: the same build up to stage TARGET, tagged NAME.
tag_stage() {
  local a stage_args=()
  for a in "${args[@]}"; do [ "$a" = "$tag" ] && stage_args+=("$2") || stage_args+=("$a"); done
  "$scdino_engine" "${stage_args[@]}" --target "$1" . >&2
}
if [ -n "$build_stage" ]; then
  # The stages that download come first, each tagged as soon as it is
  # built: scdino_prune_build_leftovers removes the stages no tagged image
  # descends from, so a build killed in its compile (a CI run cut short, a
  # machine lost) would otherwise lose the local packages and the toolchain
  # (the CUDA toolkit and LibTorch, ~10 GB, 40 minutes of a cold run). The
  # local packages' stage needs its own tag even after a whole build: the
  # toolchain copies its files, so no tagged image descends from it.
  tag_stage packages "$build_stage-packages" || { echo "scdino: building the GPU image's local packages failed" >&2; exit 1; }
  # The bare toolchain (a compiler, CMake, Ninja, LibTorch 2.6 CUDA, NCCL):
  # where the build from the dependency pack alone is proven.
  tag_stage toolchain-base "$build_stage-toolchain" || { echo "scdino: building the GPU image's bare toolchain failed" >&2; exit 1; }
  echo "scdino: bare toolchain tagged: $build_stage-toolchain"
  # The whole toolchain under the compiling stage's tag until the compile
  # below moves the tag onto it.
  tag_stage toolchain "$build_stage" || { echo "scdino: building the GPU image's toolchain failed" >&2; exit 1; }
  # The compile, tagged as soon as it is done: the pack's build, which
  # shares its compiler cache (--ccache), starts from there.
  tag_stage binaries "$build_stage" || { echo "scdino: compiling scdino in the GPU image failed" >&2; exit 1; }
  echo "scdino: compiling stage tagged: $build_stage"
fi
if ! "$scdino_engine" "${args[@]}" . >&2; then
  free_gb=$(scdino_free_gb "$storage")
  echo "scdino: building $tag from $dockerfile failed${free_gb:+ ($free_gb GB free in $storage; a cold build needs about $need_gb GB)}" >&2
  exit 1
fi
seconds=$(( $(date +%s) - start ))
size=$("$scdino_engine" image inspect --format '{{.Size}}' "$tag")
echo "scdino: built $tag in ${seconds}s, $(( size / 1000000 )) MB ($scdino_engine, $dockerfile${prebuilt:+, binaries from $prebuilt}${cudnn_dir:+, cuDNN from $cudnn_file})"
if [ -n "$build_stage" ]; then
  echo "scdino: tagged the compiling stage as $build_stage (build tree /opt/scdino/build: SCDINO_SKIP_UNBUILT_SUITES=1 ctest -L unit)"
  echo "scdino: tagged the bare toolchain stage as $build_stage-toolchain (tests/deploy/gpu_pack_build_test.sh)"
fi

if [ -n "$sqsh" ]; then
  scdino_enroot_import "$sqsh" "$tag" || exit 1
  echo "scdino: $sqsh ready for srun --container-image=$sqsh"
fi

if [ -n "$bundle" ]; then
  # An OCI bundle (rootfs/ + config.json) for Slurm's own --container
  # (oci.conf, runc). The process, environment and mounts of config.json are
  # completed by Slurm for each step; the host network is kept so that the
  # control API and metrics are reachable as without a container.
  mkdir -p "$bundle/rootfs"
  [ -z "$(ls -A "$bundle/rootfs")" ] || { echo "scdino: --oci-bundle: $bundle/rootfs is not empty" >&2; exit 2; }
  cid=$("$scdino_engine" create "$tag" true)
  "$scdino_engine" export "$cid" | tar -x -C "$bundle/rootfs"
  "$scdino_engine" rm "$cid" >/dev/null
  oci_config "$tag" "$mounts" > "$bundle/config.json"
  echo "scdino: OCI bundle $bundle ready for srun --container=$bundle"
fi
