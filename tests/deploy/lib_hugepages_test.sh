#!/bin/bash
# deploy/slurm/lib.sh exports glibc's huge-page tunable for a job's steps,
# keeps a GLIBC_TUNABLES of the user's (and their own glibc.malloc.hugetlb),
# and the tunable gives a process's malloc'd memory huge pages on this
# machine where the kernel's THP mode allows it.
# Usage: lib_hugepages_test.sh SOURCE_DIR
set -u
src=$1
failures=0
# shellcheck disable=SC2016 # the inner shell expands them
tunables_after_lib() {  # the GLIBC_TUNABLES a job's steps see, from a given one ("-": unset); lib.sh sourced twice
  local given=(-u GLIBC_TUNABLES)
  [ "$1" = - ] || given=(GLIBC_TUNABLES="$1")
  env "${given[@]}" bash -c '. "$1/deploy/slurm/lib.sh"; . "$1/deploy/slurm/lib.sh"; printf %s "${GLIBC_TUNABLES-unset}"' _ "$src"
}
expect() {  # expect GIVEN WANT
  local got
  got=$(tunables_after_lib "$1")
  if [ "$got" = "$2" ]; then echo "ok: GLIBC_TUNABLES '$1' -> '$got'"
  else echo "FAIL: GLIBC_TUNABLES '$1' -> '$got', expected '$2'"; failures=$((failures + 1)); fi
}
expect - glibc.malloc.hugetlb=1
expect glibc.malloc.arena_max=2 glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1
expect glibc.malloc.hugetlb=0 glibc.malloc.hugetlb=0
expect glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0 glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0

# The effect: 64 MiB from malloc, touched, in huge pages with the tunable
# and in none without it (where the kernel's THP mode is "madvise"; with
# "always" both get them, with "never" neither).
mode=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true)
huge_kib() {  # ENV-ARGS: AnonHugePages of a process that touched 64 MiB of malloc'd memory
  env "$@" /usr/bin/python3 -c '
b = bytearray(64 << 20)
print(next(l.split()[1] for l in open("/proc/self/smaps_rollup") if l.startswith("AnonHugePages")))'
}
with=$(huge_kib GLIBC_TUNABLES="$(tunables_after_lib -)") without=$(huge_kib -u GLIBC_TUNABLES)
case $mode in
  madvise)
    if [ "$with" -ge 32768 ] && [ "$without" = 0 ]; then echo "ok: THP madvise: ${with} KiB in huge pages with the tunable, ${without} without"
    else echo "FAIL: THP madvise: ${with} KiB in huge pages with the tunable (expected at least 32768), ${without} without (expected 0)"; failures=$((failures + 1)); fi ;;
  always|never) echo "ok: THP $mode on this kernel: ${with} KiB with the tunable, ${without} without (the tunable changes nothing here)" ;;
  *) echo "FAIL: cannot read the kernel's THP mode from /sys/kernel/mm/transparent_hugepage/enabled ('$mode')"; failures=$((failures + 1)) ;;
esac
[ "$failures" = 0 ] || exit 1
