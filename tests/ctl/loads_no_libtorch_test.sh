#!/usr/bin/env bash
# scdinoctl loads no LibTorch: the run layer, the control plane and common
# beneath them link none (common's LibTorch part is a library of its own,
# docs/architecture.md), so a status or a watch starts in milliseconds, on a
# login node as on a loaded compute node, not after LibTorch's seconds.
#   tests/ctl/loads_no_libtorch_test.sh SCDINOCTL
set -uo pipefail
ctl=${1:?usage: loads_no_libtorch_test.sh SCDINOCTL}
libs=$(ldd "$ctl") || { echo "FAIL: ldd $ctl failed"; exit 1; }
echo "$libs" | grep -q 'libgrpc++' || { echo "$libs"; echo "FAIL: ldd lists no gRPC for $ctl: not the program expected"; exit 1; }
if torch=$(echo "$libs" | grep -E 'lib(torch|c10)[^ ]*\.so'); then
  echo "FAIL: $ctl loads LibTorch:"; echo "$torch"; exit 1
fi
"$ctl" --version >/dev/null || { echo "FAIL: $ctl --version failed"; exit 1; }
echo "ok: $ctl loads $(echo "$libs" | wc -l) libraries, none of LibTorch"
