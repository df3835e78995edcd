#!/usr/bin/env bash
# Makes the dependency pack a lent GPU machine builds scdino from: a
# relocatable prefix of Debian 12's headers and the shared libraries scdino
# links (everything but LibTorch, which the machine brings as a pip torch),
# plus pkg-config. Debian 12's libraries load on a newer glibc (the lent
# machine has 2.39); Debian 13's need 2.41 and do not.
#
#   bash scripts/pack-gpu-deps.sh [OUT_DIR]      # default build/gpu-deps-pack
#   cmake -DSCDINO_DEPS_PACK=OUT_DIR ...          # a build from the pack alone (cmake/ScdinoPack.cmake)
#
# What it holds, under OUT_DIR/usr in Debian's own layout (their CMake files
# resolve only there):
#   - the headers, CMake and pkg-config files of the -dev packages in DEV
#     (pkg-config files rewritten to find their prefix from where they lie);
#   - the libraries of RUNTIME, and of what they load in turn (OpenEXR
#     among them: OpenCV's image codecs make an OpenEXR object when they
#     register, at the first image read or written, so a stand-in there
#     ended the trainer);
#   - stand-ins for the libraries in STANDIN: reached only through parts of
#     OpenCV and HDF5 that scdino never calls (GDAL and GDCM under OpenCV's
#     image codecs, BLAS and LAPACK under its core, libcurl under HDF5's S3
#     driver), each exporting exactly what the kept libraries import from it
#     and aborting with the function's name if called, but for the functions
#     of STANDIN_RETURNS, which return at once: OpenCV's codecs call them
#     when they register (scripts/make-standin.py);
#   - OpenCV's CMake package written anew for the three modules scdino links
#     (Debian's stops unless all 55 modules' libraries are present);
#   - bin/pkg-config, Debian 12's pkgconf running from the pack;
#   - bin/scdino-pack-view (scripts/pack-view.sh), the view of the pack a
#     build reads it through: the building machine's own library wherever
#     its loader has one of the same soname.
# OUT_DIR/MANIFEST.txt lists every package and version, the stand-ins and
# the size. The pack must stay within SCDINO_PACK_MAX_MIB (48) MiB: a command
# to the lent machine carries at most 64. Downloaded packages are kept for
# the next run in SCDINO_PACK_DEBS (~/.cache/scdino/pack-debs). Needs Debian
# 12 with apt's lists, dpkg-deb, readelf, python3 and a C compiler
# (install-deps.sh build has them).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/build/gpu-deps-pack}
max_mib=${SCDINO_PACK_MAX_MIB:-48}
arch=x86_64-linux-gnu

# The -dev packages: headers, CMake and pkg-config files (their .a files
# are dropped but for GoogleTest's, which has no shared library).
DEV=(nlohmann-json3-dev libyaml-cpp-dev libtiff-dev zlib1g-dev libopencv-core-dev libopencv-imgproc-dev
     libopencv-imgcodecs-dev libeigen3-dev libspectra-dev libhdf5-dev libssl-dev libcli11-dev libgloo-dev
     libgtest-dev)
# The libraries linked, and those they load.
RUNTIME=(libyaml-cpp0.7 libtiff6 zlib1g libopencv-core406 libopencv-imgproc406 libopencv-imgcodecs406
         libhdf5-103-1 libssl3 libtbb12 libjpeg62-turbo libwebp7 libpng16-16 libopenjp2-7 libdeflate0 libjbig0
         liblerc4 libzstd1 liblzma5 libsz2 libaec0 libopenexr-3-1-30 libimath-3-1-29 pkgconf-bin libpkgconf3)
# soname:package of the libraries replaced by stand-ins.
STANDIN=(libgdal.so.32:libgdal32 libgdcmMSFF.so.3.0:libgdcm3.0 libgdcmDSED.so.3.0:libgdcm3.0
         libGLX.so.0:libglx0 liblapack.so.3:liblapack3 libblas.so.3:libblas3 libcurl.so.4:libcurl4)
# Void functions of the stand-ins that OpenCV calls when its image codecs
# register (its GDAL codec's constructor): they return instead of aborting.
STANDIN_RETURNS=(GDALAllRegister)
# What every machine that builds C++ has: never packed.
SYSTEM="libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 libgomp.so.1"

fail() { echo "scdino: pack-gpu-deps.sh: $*" >&2; exit 1; }
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
  fail "run on Debian 12 (bookworm): its libraries load on the lent machine's glibc; this is ${PRETTY_NAME:-unknown}"
for tool in apt-get dpkg-deb readelf python3 cc; do
  command -v "$tool" >/dev/null || fail "needs $tool (bash scripts/install-deps.sh build)"
done

debs=${SCDINO_PACK_DEBS:-${XDG_CACHE_HOME:-$HOME/.cache}/scdino/pack-debs}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$debs"
standin_pkgs=()
for s in "${STANDIN[@]}"; do standin_pkgs+=("${s#*:}"); done
all=("${DEV[@]}" "${RUNTIME[@]}" "${standin_pkgs[@]}")
# The candidate version of each package; download what the cache lacks
# (apt-get download names an epoch's colon %3a).
declare -A file_of
missing=()
while read -r pkg version; do
  [ "$version" != "(none)" ] || fail "apt has no candidate for $pkg (apt-get update? is it in Debian 12?)"
  f=$(ls "$debs/${pkg}_${version//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
  if [ -n "$f" ]; then file_of[$pkg]=$f; else missing+=("$pkg=$version"); fi
done < <(apt-cache policy "${all[@]}" | awk '/^[^ ]/ {sub(":$", "", $1); p=$1} /Candidate:/ {print p, $2}')
if [ "${#missing[@]}" -gt 0 ]; then
  (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >/dev/null) ||
    fail "apt-get download ${missing[*]} failed"
  for m in "${missing[@]}"; do
    pkg=${m%%=*} version=${m#*=}
    file_of[$pkg]=$(ls "$debs/${pkg}_${version//:/%3a}_"*.deb | head -1)
  done
fi
for pkg in "${all[@]}"; do [ -n "${file_of[$pkg]:-}" ] || fail "apt-cache policy knows no package $pkg"; done

rm -rf "$out"
mkdir -p "$out" "$work/standin"
for pkg in "${DEV[@]}" "${RUNTIME[@]}"; do dpkg-deb -x "${file_of[$pkg]}" "$out"; done
for pkg in "${standin_pkgs[@]}"; do dpkg-deb -x "${file_of[$pkg]}" "$work/standin"; done

# Keep headers, libraries, CMake and pkg-config files, and pkgconf.
lib=$out/usr/lib/$arch
# liblzma, zlib and friends live in /lib on Debian 12 (merged /usr): move them beside the others.
if [ -d "$out/lib/$arch" ]; then cp -a "$out/lib/$arch/." "$lib/" && rm -rf "$out/lib"; fi
# Gloo is used for its headers only (its CMake files name a /usr library not packed).
rm -rf "$out"/usr/share/{doc,man,lintian,bug,info,pkgconfig/personality.d,cmake/Gloo} "$out"/usr/src "$out"/etc "$out"/sbin \
  "$lib"/{engines-3,ossl-modules}
find "$out/usr/bin" -mindepth 1 ! -name pkgconf -delete 2>/dev/null || true
find "$lib" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
# Parts no scdino file includes or links: Eigen's unsupported modules,
# OpenCV's CUDA and OpenCL headers, HDF5's Fortran modules, libssl.
rm -rf "$out"/usr/include/eigen3/unsupported "$out"/usr/include/opencv4/opencv2/core/{cuda,opencl} \
  "$out"/usr/include/hdf5/serial/*.mod "$lib"/libssl.so* "$lib"/pkgconfig/{libssl,openssl}.pc
# Links that name an absolute path (zlib1g-dev's libz.so names /lib/...)
# point into the pack instead: relative, so that the pack can move.
while read -r link; do
  target=$(readlink "$link")
  inside=$out/usr${target#/usr}
  [ -e "$inside" ] || inside=$(dirname "$link")/$(basename "$target")
  ln -sfn "$(realpath --relative-to="$(dirname "$link")" -m "$inside")" "$link"
done < <(find "$out" -type l -lname '/*')
find "$out" -xtype l -delete   # links to libraries of packages not packed (HDF5's C++ and Fortran, ...)

[ -z "$(find "$out" -type l -lname '/*')" ] || fail "links to absolute paths are left: $(find "$out" -type l -lname '/*')"

# Stand-ins, built against what the kept libraries import.
importers=$(find "$lib" -maxdepth 2 -name '*.so.*' -type f | sort)
declare -A standin_of
for s in "${STANDIN[@]}"; do
  soname=${s%%:*}
  real=$(find "$work/standin" -name "$soname" | head -1)
  [ -n "$real" ] || fail "${s#*:} has no $soname"
  # shellcheck disable=SC2086
  python3 "$src/scripts/make-standin.py" --real "$real" --soname "$soname" --out "$lib/$soname" \
    "${STANDIN_RETURNS[@]/#/--returns=}" --why "scripts/pack-gpu-deps.sh packs it for linking only; scdino never calls it" $importers >> "$work/standins.txt" ||
    fail "could not make the stand-in for $soname"
  standin_of[$soname]=1
done

# Every library the kept ones load is packed, a stand-in, or the system's.
unresolved=""
while read -r f; do
  for needed in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case " $SYSTEM " in *" $needed "*) continue ;; esac
    [ -e "$lib/$needed" ] || [ -e "$lib/hdf5/serial/$needed" ] ||
      unresolved+="  $needed (needed by ${f#"$out"/})"$'\n'
  done
done < <(find "$lib" "$out/usr/bin" -type f \( -name '*.so*' -o -name pkgconf \))
[ -z "$unresolved" ] ||
  fail "these libraries are neither packed nor stood in for; add their packages to RUNTIME (or STANDIN):"$'\n'"$unresolved"

# pkg-config files find their prefix from where they lie (pkgconf's
# pcfiledir); nothing points at /usr.
while read -r pc; do
  up=$(realpath --relative-to="$(dirname "$pc")" "$out/usr")
  sed -i -e "s#^prefix=/usr\$#prefix=\${pcfiledir}/$up#" -e "s#\(^\|[ =\"]\)\(-[IL]\)\{0,1\}/usr/#\1\2\${pcfiledir}/$up/#g" "$pc"
done < <(find "$out/usr" -name '*.pc')
stale=$(find "$out/usr" -name '*.pc' -exec grep -lE '(^|[ ="]|-[IL])/usr/' {} + || true)
[ -z "$stale" ] || fail "pkg-config files still name /usr: $stale"
stale=$(grep -rlE '"/usr/(lib|include)[^"]*"' --include='*.cmake' "$out/usr" | xargs -r grep -LE '_realOrig|REALPATH' || true)
[ -z "$stale" ] || fail "CMake files hard-code /usr: $stale"

# OpenCV's package for the three modules scdino links.
ocv=$lib/cmake/opencv4
mkdir -p "$ocv"
ocv_version=$(sed -n 's/^#define CV_VERSION_\(MAJOR\|MINOR\|REVISION\) *\([0-9]*\).*/\2/p' \
  "$out/usr/include/opencv4/opencv2/core/version.hpp" | paste -sd.)
cat > "$ocv/OpenCVConfig.cmake" <<EOF
# Written by scripts/pack-gpu-deps.sh: OpenCV $ocv_version's core, imgproc and
# imgcodecs from Debian 12, the only modules in this pack.
get_filename_component(_ocv_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)
set(OpenCV_VERSION $ocv_version)
set(OpenCV_INCLUDE_DIRS "\${_ocv_prefix}/include/opencv4" "\${_ocv_prefix}/include/$arch/opencv4")
set(OpenCV_LIBS "")
foreach(_m core imgproc imgcodecs)
  if(NOT TARGET opencv_\${_m})
    add_library(opencv_\${_m} SHARED IMPORTED)
    set_target_properties(opencv_\${_m} PROPERTIES
      IMPORTED_LOCATION "\${_ocv_prefix}/lib/$arch/libopencv_\${_m}.so.$ocv_version"
      INTERFACE_INCLUDE_DIRECTORIES "\${OpenCV_INCLUDE_DIRS}")
  endif()
  list(APPEND OpenCV_LIBS opencv_\${_m})
endforeach()
set_property(TARGET opencv_imgproc PROPERTY INTERFACE_LINK_LIBRARIES opencv_core)
set_property(TARGET opencv_imgcodecs PROPERTY INTERFACE_LINK_LIBRARIES opencv_imgproc opencv_core)
foreach(_m \${OpenCV_FIND_COMPONENTS})
  if(NOT _m MATCHES "^(core|imgproc|imgcodecs)\$")
    set(OpenCV_FOUND FALSE)
    set(OpenCV_NOT_FOUND_MESSAGE "the scdino pack holds OpenCV's core, imgproc and imgcodecs only, not \${_m}")
  endif()
endforeach()
EOF
cat > "$ocv/OpenCVConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION $ocv_version)
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
EOF

# pkg-config, from the pack, seeing only the pack.
mkdir -p "$out/bin"
cat > "$out/bin/pkg-config" <<'EOF'
#!/bin/sh
# Debian 12's pkgconf, run from the scdino pack, seeing only the pack's files.
pack=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$pack/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
PKG_CONFIG_LIBDIR="$pack/usr/lib/x86_64-linux-gnu/pkgconfig:$pack/usr/share/pkgconfig" \
  exec "$pack/usr/bin/pkgconf" "$@"
EOF
chmod +x "$out/bin/pkg-config"
"$out/bin/pkg-config" --exists hdf5-serial || fail "the pack's pkg-config does not find hdf5-serial"
# What a build reads the pack through (scripts/pack-view.sh).
cp "$src/scripts/pack-view.sh" "$out/bin/scdino-pack-view"

bytes=$(du -sb "$out" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
{
  echo "# scdino dependency pack (scripts/pack-gpu-deps.sh), made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $PRETTY_NAME"
  echo "# size: $bytes bytes ($mib MiB; at most $max_mib)"
  echo "# package version role"
  for pkg in "${DEV[@]}"; do echo "$pkg $(dpkg-deb -f "${file_of[$pkg]}" Version) dev"; done
  for pkg in "${RUNTIME[@]}"; do echo "$pkg $(dpkg-deb -f "${file_of[$pkg]}" Version) runtime"; done
  for s in "${STANDIN[@]}"; do echo "${s#*:} $(dpkg-deb -f "${file_of[${s#*:}]}" Version) stand-in:${s%%:*}"; done
  sed 's/^/# stand-in /' "$work/standins.txt"
} > "$out/MANIFEST.txt"
if [ "$bytes" -gt $(( max_mib * 1048576 )) ]; then
  fail "the pack is $mib MiB ($bytes bytes), over the $max_mib MiB limit (SCDINO_PACK_MAX_MIB); its largest files:"$'\n'"$(find "$out" -type f -printf '%s %P\n' | sort -rn | head -10)"
fi
echo "scdino: dependency pack in $out: $mib MiB ($bytes bytes; at most $max_mib), $(grep -c ' dev$' "$out/MANIFEST.txt") -dev and $(grep -c ' runtime$' "$out/MANIFEST.txt") runtime packages, $(grep -c 'stand-in:' "$out/MANIFEST.txt") stand-ins"
