#!/bin/bash
# scdino-config check against the shipped Prometheus: a config whose
# metrics targets go where monitoring/prometheus/prometheus.yml reads them
# passes quietly; one whose targets go elsewhere is warned about, naming
# both directories and the two ways to make them agree.
# Usage: config_check_test.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
config="$build/services/tools/scdino-config"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# The directory prometheus.yml reads the scdino processes' targets from.
shipped=$(sed -n 's|^ *- \(/.*\)/\*\.json$|\1|p' "$src/monitoring/prometheus/prometheus.yml" | head -1)
[ -n "$shipped" ] || fail "no file_sd directory found in monitoring/prometheus/prometheus.yml"

printf 'meta: {output_dir: %s}\nscdino: {data_source: synthetic}\n' "$(dirname "$shipped")" > "$work/agrees.yaml"
out=$("$config" check "$work/agrees.yaml" 2>&1) || fail "check of a config that agrees failed: $out"
grep -q "warning" <<<"$out" && fail "a config whose targets go to $shipped was warned about: $out"

printf 'meta: {output_dir: %s/runs}\nscdino: {data_source: synthetic}\n' "$work" > "$work/elsewhere.yaml"
out=$("$config" check "$work/elsewhere.yaml" 2>&1) || fail "check of a valid config failed: $out"
grep -q "warning: the metrics targets go to $work/runs/prometheus_targets" <<<"$out" &&
  grep -q "the shipped Prometheus reads $shipped" <<<"$out" &&
  grep -q "scripts/monitoring-up.sh --sd-dir $work/runs/prometheus_targets" <<<"$out" ||
  fail "a config whose targets go elsewhere was not warned about as expected: $out"

printf 'meta: {output_dir: %s/runs}\nscdino: {data_source: synthetic, metrics: {file_sd_dir: %s}}\n' "$work" "$shipped" > "$work/set.yaml"
out=$("$config" check "$work/set.yaml" 2>&1) || fail "check failed: $out"
grep -q "warning" <<<"$out" && fail "scdino.metrics.file_sd_dir: $shipped was warned about: $out"

printf 'meta: {output_dir: %s/runs}\nscdino: {data_source: synthetic, metrics: {enabled: false}}\n' "$work" > "$work/off.yaml"
out=$("$config" check "$work/off.yaml" 2>&1) || fail "check failed: $out"
grep -q "warning" <<<"$out" && fail "a config without metrics was warned about its targets: $out"
[ "$failures" -eq 0 ] && echo "ok: scdino-config check warns exactly when the targets miss $shipped"
exit $((failures > 0))
