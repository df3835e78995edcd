#!/usr/bin/env bash
# Every program that links LibTorch names libstdc++ before it among its
# libraries (CMakeLists.txt, after find_package(Torch)): a pip LibTorch
# exports its own copies of std::filesystem's functions, and a program that
# names libtorch first calls those, which crash (pytorch/pytorch#133437; on
# an H200 with torch 2.11, docs/performance.md).
# scripts/gpu-first-contact.sh runs it on the lent machine's build too, where
# only the first contact's programs are built (MIN_PROGRAMS 4).
#   link_order_test.sh SOURCE_DIR BUILD_DIR [MIN_PROGRAMS (10)]
set -uo pipefail
build=${2:?usage: link_order_test.sh SOURCE_DIR BUILD_DIR [MIN_PROGRAMS]}
min=${3:-10}
checked=0 failed=0
while IFS= read -r -d '' prog; do
  needed=$(readelf -d "$prog" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  torch_at=$(echo "$needed" | grep -nE '^(libtorch|libc10)' | head -1 | cut -d: -f1)
  [ -n "$torch_at" ] || continue
  checked=$((checked + 1))
  cxx_at=$(echo "$needed" | grep -n '^libstdc++\.so' | head -1 | cut -d: -f1)
  if [ -z "$cxx_at" ] || [ "$cxx_at" -gt "$torch_at" ]; then
    echo "FAIL: $prog names $(echo "$needed" | sed -n "${torch_at}p") (library $torch_at) before libstdc++ (${cxx_at:-absent}): $(echo $needed)"
    failed=$((failed + 1))
  fi
done < <(find "$build/services" "$build/bench" "$build/tests" -type f -perm -u+x \( -name 'scdino*' \) -print0 2>/dev/null)
# The services, the benchmarks and the test suites: far more than ten.
[ "$checked" -ge "$min" ] || { echo "FAIL: only $checked programs linking LibTorch found under $build (at least $min)"; exit 1; }
echo "$checked programs linking LibTorch; $failed name libtorch before libstdc++"
[ "$failed" = 0 ]
