#!/usr/bin/env bash
# Installs the Debian packages scdino builds, tests and packages with.
# Idempotent: when every package is already installed it does nothing.
#
#   bash scripts/install-deps.sh            # everything (scripts/setup.sh)
#   bash scripts/install-deps.sh build      # only what compiling needs (containers/Dockerfile)
#
# Groups: build (compilers and -dev packages), test (the real peers the tests
# run: Prometheus, Alertmanager, node_exporter, GoogleTest, Python with torch,
# anndata and grpcio), container (podman, mmdebstrap and runc for the
# container tests and scripts/build-image.sh).
set -euo pipefail

build=(
  build-essential cmake ninja-build ccache pkg-config git python3
  libtorch-dev libopenblas0-pthread libgloo-dev
  libtiff-dev libopencv-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev
  libhdf5-dev libcli11-dev
)
test=(
  prometheus prometheus-alertmanager prometheus-node-exporter
  libgtest-dev libgmock-dev
  python3-numpy python3-anndata python3-torch python3-grpcio
)
container=(podman mmdebstrap runc)

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build test container)
packages=()
for g in "${groups[@]}"; do
  case $g in
    build) packages+=("${build[@]}") ;;
    test) packages+=("${test[@]}") ;;
    container) packages+=("${container[@]}") ;;
    *) echo "scdino: install-deps.sh: unknown group '$g' (expected build, test or container)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "scdino: installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
