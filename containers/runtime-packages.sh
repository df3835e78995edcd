#!/usr/bin/env bash
# Prints, one per line, the distribution packages holding the shared
# libraries that the programs in PREFIX/bin link directly (their ELF NEEDED
# entries), as dpkg knows them on this machine: the build stage of an image,
# or the Debian 12 host of scripts/build-image.sh --prebuilt. The runtime
# stage installs exactly these (their dependencies bring the rest), so no
# library list is kept by hand. Libraries no package owns (a pip LibTorch in
# an NGC image) are already in the base and are skipped.
#
#   containers/runtime-packages.sh /opt/scdino > runtime-packages.txt
set -euo pipefail
prefix=${1:?usage: runtime-packages.sh PREFIX}
declare -A paths=()
for program in "$prefix"/bin/*; do
  [ -f "$program" ] && [ -x "$program" ] || continue
  # Scripts (the .pth converter) have no dynamic section.
  needed=$(readelf -d "$program" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p') || continue
  [ -n "$needed" ] || continue
  resolved=$(ldd "$program")
  for soname in $needed; do
    path=$(sed -n "s|^[[:space:]]*$soname => \(/[^ ]*\) .*|\1|p" <<<"$resolved")
    [ -n "$path" ] && paths[$(realpath "$path")]=1
  done
done
# dpkg knows a library by the path its package installed, /usr/lib or /lib
# (merged /usr): ask for both spellings, once for every library.
queries=()
for p in "${!paths[@]}"; do queries+=("$p" "${p#/usr}"); done
[ ${#queries[@]} -gt 0 ] || { echo "runtime-packages.sh: no dynamic programs in $prefix/bin" >&2; exit 1; }
# dpkg -S fails when any one spelling is unknown, which one always is.
owners=$(dpkg -S "${queries[@]}" 2>/dev/null || true)
cut -d: -f1 <<<"$owners" | tr ',' '\n' | sed 's/^ *//; /^$/d' | sort -u |
  { grep -vxE 'libc6|libgcc-s1|libstdc\+\+6' || true; }
