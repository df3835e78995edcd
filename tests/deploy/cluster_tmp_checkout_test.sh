#!/bin/bash
# The test cluster started from a checkout under /tmp (CI may clone
# anywhere): each node has its own /tmp, which hid such a checkout, and
# Slurm's prolog, a script of the checkout, failed on every node ("srun:
# Prolog failure on node node1"). Started from a copy of the scripts under
# /tmp, a job on both nodes runs, every task sees the checkout, and each
# node's /tmp is still its own. The cluster is started again from SOURCE_DIR
# afterwards, as the other cluster tests expect it.
# Usage: cluster_tmp_checkout_test.sh SOURCE_DIR
set -u
src=$1
tmp=$(mktemp -d /tmp/scdino-checkout-XXXXXX)
co="$tmp/main"
mkdir -p "$co"
cp -a "$src/scripts" "$src/monitoring" "$co/"
restore() {
  bash "$co/scripts/slurm-cluster.sh" stop > /dev/null 2>&1
  bash "$src/scripts/slurm-cluster.sh" start > "$tmp.restart.log" 2>&1 ||
    { echo "FAIL: the cluster did not start again from $src:"; tail -5 "$tmp.restart.log"; }
  rm -rf "$tmp" "$tmp.restart.log"
}
trap restore EXIT
bash "$src/scripts/slurm-cluster.sh" stop > /dev/null 2>&1
if ! bash "$co/scripts/slurm-cluster.sh" start; then
  echo "FAIL: the cluster does not start from a checkout in $tmp"
  exit 1
fi
eval "$(bash "$co/scripts/slurm-cluster.sh" env)"
out=$(timeout 120 srun -N2 --ntasks-per-node=1 -w node1,node2 \
      sh -c "echo \$(hostname) \$(test -f '$co/scripts/slurm-cluster.sh' && echo sees-the-checkout)" 2>&1)
echo "$out"
for n in node1 node2; do
  grep -qx "$n sees-the-checkout" <<<"$out" || echo "FAIL: $n's task does not see the checkout $co"
done
grep -q "Prolog failure" <<<"$out" && echo "FAIL: Slurm's prolog failed"
# Each node's /tmp is still its own.
bash "$co/scripts/slurm-cluster.sh" exec node1 sh -c 'echo x > /tmp/scdino-node1-only'
[ -e /tmp/scdino-node1-only ] && echo "FAIL: node1's /tmp is this machine's"
bash "$co/scripts/slurm-cluster.sh" exec node2 test -e /tmp/scdino-node1-only && echo "FAIL: node2 sees node1's /tmp"
bash "$co/scripts/slurm-cluster.sh" exec node1 rm -f /tmp/scdino-node1-only
echo "ok: the cluster runs from a checkout under /tmp"
