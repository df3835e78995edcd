#!/bin/bash
# scdino-pack-view DIR: the dependency pack this script lies in
# (scripts/pack-gpu-deps.sh copies it to the pack's bin/) as links in DIR,
# except that each library whose soname this machine's loader already knows
# (ldconfig -p) links to the machine's own. A LibTorch there may need a newer
# one (Debian 13's needs OpenSSL 3.2's libcrypto and a real BLAS): the pack's
# older copy, or its stand-in, must not shadow it, at link time or at run
# time. cmake/ScdinoDependencies.cmake makes the view at configure time.
# Prints the libraries it took from the machine, a line each.
set -euo pipefail
pack=$(cd "$(dirname "$0")/.." && pwd)
view=${1:?usage: scdino-pack-view DIR}
rm -rf "$view"
mkdir -p "$view"
(cd "$pack" && find . -type d) | while read -r d; do mkdir -p "$view/$d"; done
(cd "$pack" && find . -type l) | while read -r l; do cp -P "$pack/$l" "$view/$l"; done
(cd "$pack" && find . -type f) | while read -r f; do ln -s "$pack/${f#./}" "$view/$f"; done
declare -A system
while read -r name path; do
  [ -n "${system[$name]:-}" ] || system[$name]=$path
done < <(ldconfig -p 2>/dev/null | awk '/x86-64/ && /=>/ {print $1, $NF}')
while read -r f; do
  soname=$(readelf -d "$pack/$f" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ -n "$soname" ] && [ -n "${system[$soname]:-}" ] || continue
  ln -sfn "${system[$soname]}" "$view/$f"
  echo "$soname ${system[$soname]}"
done < <(cd "$pack" && find . -type f -name '*.so*')
