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

# A combination naming a channel the images lack is refused before anything
# queues, naming the entry, the channel and the images' count; data the
# check cannot see is said, not judged.
"$build/services/tools/scdino-synth" --out "$work/cells" --classes 2 --per-class 2 --channels 3 --size 16 >/dev/null 2>&1 ||
  fail "scdino-synth failed"
printf 'meta: {output_dir: %s/runs, dataset_dir: %s/cells, channel_dict: {0: A, 1: B, 2: C, 3: D},\n  selected_channel_combination_per_run: ["012", "3"]}\n' \
  "$work" "$work" > "$work/combos.yaml"
out=$("$config" check "$work/combos.yaml" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && grep -q 'selected_channel_combination_per_run\[1\] ("3") selects channel 3 (D), but the images have 3 channel(s)' <<<"$out" ||
  fail "a combination naming channel 3 of 3-channel images was not refused (exit $rc, want 2): $out"
sed 's/"3"]/"2"]/' "$work/combos.yaml" > "$work/fits.yaml"
out=$("$config" check "$work/fits.yaml" 2>&1) || fail "check of combinations the images have failed: $out"
grep -q "not checked" <<<"$out" && fail "the images beside the config were not checked: $out"
sed "s|$work/cells|$work/elsewhere|" "$work/combos.yaml" > "$work/away.yaml"
out=$("$config" check "$work/away.yaml" 2>&1) || fail "check of a config whose data is not here failed: $out"
grep -q "the combinations' channels not checked against the images: $work/elsewhere (meta.dataset_dir)" <<<"$out" ||
  fail "data that is not here was not said: $out"
# Images that do not read here (files the check cannot open): said, not judged.
mkdir -p "$work/unreadable/a" && printf 'not a tiff' > "$work/unreadable/a/x.tif"
sed "s|$work/cells|$work/unreadable|" "$work/combos.yaml" > "$work/unreadable.yaml"
out=$("$config" check "$work/unreadable.yaml" 2>&1) || fail "check of a config whose images do not read here failed: $out"
grep -q "the combinations' channels not checked against the images: no image of the first ones reads here" <<<"$out" ||
  fail "images that do not read were not said: $out"
# combinations: one line per combination (deploy/slurm/submit.sh sizes its
# arrays by it), each with its run folder and channel names; a --set reaches it.
out=$("$config" combinations "$work/fits.yaml" 2>&1) || fail "combinations failed: $out"
want=$(printf '0\t%s/runs/scdino_run/scDINO_ViT_channel_A_B_C\tA B C\n1\t%s/runs/scdino_run/scDINO_ViT_channel_C\tC' "$work" "$work")
[ "$out" = "$want" ] || fail "combinations listed '$out', not '$want'"
out=$("$config" combinations "$work/fits.yaml" --set meta.name_of_run=other 2>&1) || fail "combinations --set failed: $out"
[ "$(wc -l <<<"$out")" = 2 ] && grep -q "^1	$work/runs/other/scDINO_ViT_channel_C	C$" <<<"$out" || fail "combinations ignored --set: $out"
out=$("$config" combinations "$work/nosuch.yaml" 2>&1) && fail "combinations of a missing file succeeded: $out"
[ "$failures" -eq 0 ] && echo "ok: scdino-config check warns exactly when the targets miss $shipped, and refuses a combination the images cannot give"
exit $((failures > 0))
