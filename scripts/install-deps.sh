#!/usr/bin/env bash
# Installs the Debian packages scdino builds, tests and packages with.
# Idempotent: when every package is already installed it does nothing.
#
#   bash scripts/install-deps.sh            # everything (scripts/test.sh)
#   bash scripts/install-deps.sh build      # only what compiling needs (scripts/setup.sh, the Dockerfiles)
#
# Groups: build (compilers and -dev packages, GoogleTest's among them: the
# configure step declares the suites), unit (what the C++ test suites run
# beside themselves: Python with numpy, anndata and grpcio as real peers), test
# (unit, plus the servers the other tests start: Prometheus, Alertmanager,
# node_exporter; python3-torch for the converter, python3-sklearn the
# reference of the linear probe and k-means), container (podman,
# mmdebstrap and runc for the container tests and scripts/build-image.sh;
# squashfs-tools to check a .sqsh).
#
# SCDINO_LIBTORCH_PACKAGES replaces the LibTorch packages of the build group
# (default: Debian 12's CPU LibTorch 1.13 and Gloo headers); the Debian GPU
# image (containers/Dockerfile.cuda, trixie) names its CUDA LibTorch there.
set -euo pipefail

read -r -a libtorch <<<"${SCDINO_LIBTORCH_PACKAGES:-libtorch-dev libgloo-dev}"
build=(
  build-essential cmake ninja-build ccache pkg-config git python3
  "${libtorch[@]}" libopenblas0-pthread libopenblas-dev libdnnl-dev
  libtiff-dev libopencv-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev
  libhdf5-dev libcli11-dev libgtest-dev libgmock-dev
)
unit=(
  python3-numpy python3-anndata python3-grpcio
)
test=(
  "${unit[@]}"
  prometheus prometheus-alertmanager prometheus-node-exporter
  python3-torch python3-sklearn
)
container=(podman mmdebstrap runc squashfs-tools)

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build test container)
packages=()
for g in "${groups[@]}"; do
  case $g in
    build) packages+=("${build[@]}") ;;
    unit) packages+=("${unit[@]}") ;;
    test) packages+=("${test[@]}") ;;
    container) packages+=("${container[@]}") ;;
    *) echo "scdino: install-deps.sh: unknown group '$g' (expected build, unit, test or container)" >&2; exit 2 ;;
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
# A package run cut short (a killed apt, a lost machine) leaves dpkg
# "interrupted", and every apt-get install then refuses: finish it first.
if [ -n "$($SUDO dpkg --audit 2>/dev/null)" ]; then
  echo "scdino: dpkg was interrupted by an earlier package run; finishing it (dpkg --configure -a)" >&2
  $SUDO dpkg --configure -a >/dev/null
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
