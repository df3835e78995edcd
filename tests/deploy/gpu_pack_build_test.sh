#!/usr/bin/env bash
# The dependency pack a lent GPU builds from, proven without a GPU:
#   - scripts/pack-gpu-deps.sh makes it from Debian 12's packages, within
#     48 MiB, and a call into one of its stand-ins aborts naming the
#     function, but what OpenCV's codecs call when they register returns;
#   - in the GPU image's bare toolchain stage (a compiler, CMake, Ninja,
#     LibTorch 2.6 with CUDA, NCCL; none of the -dev packages scdino builds
#     with), offline, scripts/gpu-first-contact.sh --build-only configures
#     with SCDINO_REQUIRE_CUDA=ON against the pack alone and builds exactly
#     what the first contact builds, benchmarks and device checks included;
#   - what it built runs there on the CPU from the pack's libraries: the
#     model's and the training's unit suites whole (the first contact's
#     parity steps and device checks among them; the GPU image compiles the
#     other suites of the layers whose code differs between LibTorch
#     versions, tests/deploy/gpu_image_test.sh), and a benchmark step.
#   bash tests/deploy/gpu_pack_build_test.sh SOURCE_DIR BUILD_DIR [build]
# `build` makes the pack and the build and stops (scripts/test.sh runs it in
# the background once the GPU image's compile is done, so that it finds
# what the two share in the compiler cache, and the test finds the build
# tree and compiler cache warm). The toolchain image is the one
# scripts/build-image.sh --cuda --build-stage TAG tags TAG-toolchain
# (tests/deploy/gpu_image_test.sh's build). Lines starting with FAIL: fail
# the ctest.
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" gpu-pack-build "$1" "$2"
source "$src/containers/engine.sh"
scdino_engine_init || { echo "FAIL: no container engine"; exit 1; }
engine=$scdino_engine
toolchain=localhost/scdino:cuda-test-build-toolchain
fail() { echo "FAIL: $*"; exit 1; }
pack=$build/gpu-deps-pack
# The build tree outlives the test (a clean clone's files are new, but their
# content and the paths inside the container are not). A change to how
# dependencies are found starts a new tree (a CMake cache keeps what it
# found), and the old one goes. The compiler cache is the one the GPU
# image's compile fills (scdino_gpu_ccache), at the same paths as there
# (/opt/scdino/src, /opt/scdino/build): what reads no header of the pack's
# is compiled once for both.
cache=${SCDINO_GPU_PACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scdino/gpu-pack-build}
tree=tree-$( (echo /opt/scdino/build; cat "$src/CMakeLists.txt" "$src/cmake/"*.cmake "$src/scripts/pack-view.sh") |
  sha1sum | cut -c1-12)
mkdir -p "$cache/$tree"
find "$cache" -mindepth 1 -maxdepth 1 ! -name "$tree" -exec rm -rf {} +
ccache_dir=$(scdino_gpu_ccache) || fail "could not make the shared compiler cache"
shared=$(cd "${SCDINO_SHARED_DIR:-$src/../shared}" && pwd)

start=$(date +%s)
bash "$src/scripts/pack-gpu-deps.sh" "$pack" >"$work/pack.out" 2>&1 || { cat "$work/pack.out"; fail "pack-gpu-deps.sh failed"; }
tail -1 "$work/pack.out"
bytes=$(du -sb "$pack" | cut -f1)
[ "$bytes" -le $(( 48 * 1048576 )) ] || fail "the pack is $bytes bytes, over 48 MiB"
gdal=$pack/usr/lib/x86_64-linux-gnu/libgdal.so.32
out=$("$py" -c "import ctypes; ctypes.CDLL('$gdal').GDALOpen(b'x', 0)" 2>&1); rc=$?
[ "$rc" = 134 ] && grep -qF "scdino stand-in: libgdal.so.32: GDALOpen was called" <<<"$out" ||
  fail "a call into the GDAL stand-in exited $rc without naming itself: $out"
# What OpenCV's codecs call when they register returns (the first image
# read or written would end the program otherwise).
out=$("$py" -c "import ctypes; ctypes.CDLL('$gdal').GDALAllRegister(); print('returned')" 2>&1) &&
  [ "$out" = returned ] || fail "GDALAllRegister in the stand-in does not return: $out"
echo "ok: the pack, $(( bytes / 1048576 )) MiB; its stand-ins abort naming the function, but GDALAllRegister returns"
# A pack that lacks a dependency: the configure names it and its package.
cp -a "$pack" "$work/pack-without-yaml" && rm -rf "$work/pack-without-yaml/usr/lib/x86_64-linux-gnu/cmake/yaml-cpp"
cmake -S "$src" -B "$work/configure-without-yaml" -G Ninja -DSCDINO_DEPS_PACK="$work/pack-without-yaml" \
  -DSCDINO_WITH_SERVICES=OFF -DSCDINO_BUILD_TESTS=OFF -DSCDINO_BUILD_BENCH=OFF >"$work/configure.out" 2>&1 &&
  fail "a pack without yaml-cpp configured"
tr -s ' \n' ' ' <"$work/configure.out" | grep -qF "has no yaml-cpp (Debian 12: libyaml-cpp-dev, which scripts/pack-gpu-deps.sh packs)" ||
  { cat "$work/configure.out"; fail "the configure does not name the missing yaml-cpp and its package"; }
echo "ok: a pack without yaml-cpp is refused at configure time, naming libyaml-cpp-dev"

"$engine" image exists "$toolchain" || {
  bash "$src/scripts/build-image.sh" --cuda --tag scdino:cuda-test --build-stage scdino:cuda-test-build \
    --ccache "$ccache_dir" >"$work/image.out" 2>&1 || { tail -30 "$work/image.out"; fail "could not build the GPU image's toolchain"; }
}
# None of the -dev packages the image installs for scdino
# (scripts/packages/build.txt) and the pack stands for is in the bare
# toolchain. (zlib1g-dev comes with LibTorch's own dependencies there; the
# CMake cache below shows the pack's zlib used all the same.)
devs=$(awk '$3 == "dev" {print $1}' "$pack/MANIFEST.txt" |
       grep -xFf <(sed 's/#.*//' "$src/scripts/packages/build.txt" | tr -s ' \t' '\n' | sed '/^$/d') | tr '\n' ' ')
[ "$(wc -w <<<"$devs")" -ge 8 ] || fail "the pack's -dev packages are not those of build.txt: '$devs'"
held=$("$engine" run --rm "${scdino_engine_flags[@]}" --network none "$toolchain" \
  sh -c "dpkg-query -W -f='\${Package} \${db:Status-Abbrev}\n' $devs 2>/dev/null | awk '\$2 == \"ii\" {print \$1}'")
[ -z "$held" ] || fail "the bare toolchain holds -dev packages the pack stands for: $held"

# ${SCDINO_IMAGE_CPU_SHARES}: scripts/test.sh runs the background build
# beneath the tests (a container's cgroup is out of nice's reach), in a
# cgroup of its own at that weight (containers/engine.sh).
background=()
if [ -n "${SCDINO_IMAGE_CPU_SHARES:-}" ]; then
  background=(--cpu-shares "$SCDINO_IMAGE_CPU_SHARES" $(scdino_background_parent "gpu-pack-build-$$"))
  trap 'scdino_background_parent_remove "gpu-pack-build-$$"' EXIT
fi
run_in_toolchain() {
  "$engine" run --rm "${scdino_engine_flags[@]}" --network none "${background[@]}" \
    -v "$src:/opt/scdino/src:ro" -v "$cache/$tree:/opt/scdino/build" -v "$pack:/pack:ro" -v "$shared:/shared:ro" \
    -v "$ccache_dir:/var/cache/scdino-ccache" -v "$work:/work" \
    -e CCACHE_DIR=/var/cache/scdino-ccache -e SCDINO_SHARED_DIR=/shared -e OMP_NUM_THREADS=1 "$toolchain" "$@"
}
run_in_toolchain ccache -z >/dev/null
run_in_toolchain bash /opt/scdino/src/scripts/gpu-first-contact.sh --build-only /work/contact --pack /pack --build-dir /opt/scdino/build \
  >"$work/build.out" 2>&1
rc=$?
# How much of it the GPU image's compile had compiled already (0 of 0 where
# this tree was built already).
read -r hits compiles < <(run_in_toolchain ccache -s | scdino_ccache_hits)
echo "the build's compiles: ${compiles:-?}, ${hits:-?} of them from the compiler cache the GPU image's compile shares"
[ "$rc" = 0 ] || { tail -40 "$work/build.out"; grep -E "error|Error" "$work/contact/first-contact.log" | head -20; fail "the build from the pack alone failed (exit $rc)"; }
grep -E "^first-contact: \[build\]" "$work/build.out"
[ "${3:-}" != build ] || exit 0
cache_lines=$(grep -E '^(yaml-cpp_DIR|OpenCV_DIR|Eigen3_DIR|spectra_DIR|GTest_DIR|SCDINO_CLI11_INCLUDE_DIR|SCDINO_GLOO_INCLUDE_DIR|TIFF_LIBRARY_RELEASE|ZLIB_LIBRARY_RELEASE|OPENSSL_CRYPTO_LIBRARY|pkgcfg_lib_HDF5_hdf5):' \
  "$cache/$tree/CMakeCache.txt")
echo "$cache_lines"
[ "$(wc -l <<<"$cache_lines")" = 11 ] || fail "CMakeCache.txt lacks some of the pack's dependencies"
# Every one through the build's view of the pack (scripts/pack-view.sh).
! grep -v "=/opt/scdino/build/scdino-pack-view/" <<<"$cache_lines" || fail "a dependency was found outside the pack (above)"
grep -E "building from the dependency pack" "$work/contact/first-contact.log" 2>/dev/null | head -1
grep -q "^SCDINO_REQUIRE_CUDA:BOOL=ON" "$cache/$tree/CMakeCache.txt" || fail "not configured with SCDINO_REQUIRE_CUDA=ON"
echo "ok: built from the pack alone against LibTorch 2.6 CUDA in $(( $(date +%s) - start )) s"

# What it built runs, on the CPU, from the pack's libraries.
run_in_toolchain bash -c '
  set -e
  cd /opt/scdino/build
  ! ldd bench/scdino-bench-train-step | grep "not found"
  ldd bench/scdino-bench-train-step | grep -q "scdino-pack-view/usr/lib/x86_64-linux-gnu/libopencv_imgcodecs"
  SCDINO_TEST_DEVICE=cpu OPENBLAS_NUM_THREADS=1 SCDINO_SKIP_UNBUILT_SUITES=1 ctest -L unit -V \
    --parallel "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --timeout 600
  bench/scdino-bench-train-step --arch vit_tiny --depth 2 --patch 8 --global 32 --local 16 --local-crops 2 \
    --out-dim 256 --batch 2 --steps 1 --threads 2
' >"$work/run.out" 2>&1 || { tail -40 "$work/run.out"; fail "what the pack build made does not run in the toolchain"; }
grep -E "tests passed|Total Test time|images_per_s" "$work/run.out" | cut -c1-200
for t in DinoParity.TwoTrainingStepsMatchReferenceOnTheDeviceUnderTest DeviceCheck.; do
  grep -qE "\[ +OK \] $t" "$work/run.out" || fail "the pack build's suites did not run $t"
done
echo "ok: the model's and the training's suites, the first contact's checks among them, and a benchmark step ran" \
     "from the pack build (LibTorch 2.6, CPU)"
