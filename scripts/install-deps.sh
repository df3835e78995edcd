#!/usr/bin/env bash
# Installs every system package scdino builds and tests with, from Debian.
# Idempotent: when every package is already installed it does nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  libtorch-dev libopenblas0-pthread libgloo-dev
  libtiff-dev libopencv-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev
  prometheus prometheus-alertmanager prometheus-node-exporter
  libgtest-dev libgmock-dev
  libhdf5-dev libcli11-dev python3-numpy python3-anndata python3-torch python3-grpcio
)

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
