#!/usr/bin/env bash
# Installs the Debian packages scdino builds, tests and packages with.
# Idempotent: when every package is already installed it does nothing.
#
#   bash scripts/install-deps.sh            # everything (scripts/test.sh)
#   bash scripts/install-deps.sh build      # only what compiling needs (scripts/setup.sh, the Dockerfiles)
#
# Groups (one list each in scripts/packages/GROUP.txt): build (compilers and
# -dev packages), unit (what the C++ test suites run beside themselves), test
# (unit, plus what the other tests use), container (podman and friends).
#
# SCDINO_LIBTORCH_PACKAGES are the LibTorch packages of the build group
# (default: Debian 12's CPU LibTorch 1.13 and Gloo headers); the Debian GPU
# image (containers/Dockerfile.cuda, trixie) names its CUDA LibTorch there.
set -euo pipefail
lists="$(cd "$(dirname "$0")" && pwd)/packages"

# list GROUP: the packages of scripts/packages/GROUP.txt (# starts a comment).
list() {
  sed 's/#.*//' "$lists/$1.txt" | tr -s ' \t' '\n' | sed '/^$/d'
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build test container)
packages=()
for g in "${groups[@]}"; do
  case $g in
    build)
      read -r -a libtorch <<<"${SCDINO_LIBTORCH_PACKAGES:-libtorch-dev libgloo-dev}"
      packages+=("${libtorch[@]}") ;;
    unit|container) ;;
    test) packages+=($(list unit)) ;;
    *) echo "scdino: install-deps.sh: unknown group '$g' (expected build, unit, test or container)" >&2; exit 2 ;;
  esac
  [ -r "$lists/$g.txt" ] || { echo "scdino: install-deps.sh: no package list $lists/$g.txt" >&2; exit 2; }
  packages+=($(list "$g"))
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
