#!/usr/bin/env bash
# Regenerates the Swift code of the gRPC APIs from Shared/IsletProtos/*.proto, with Debian's protoc
# and the protoc plugins of the swift-protobuf and grpc-swift-protobuf versions Package.swift uses.
# The generated files are committed, so a normal build never needs protoc or the plugins (building
# them takes several minutes).
#
#   scripts/generate-protos.sh
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"

if ! command -v protoc >/dev/null; then
  as_root apt-get install -y -q protobuf-compiler
fi

# The plugins build in a package of their own (so this works even when the generated code is
# missing or broken), pinned to the versions Package.swift asks for.
plugins=.build-protoc
mkdir -p "$plugins"
protobuf=$(grep -oE 'apple/swift-protobuf", from: "[0-9.]+"' Package.swift | grep -oE '[0-9]+\.[0-9]+\.[0-9]+')
grpc_protobuf=$(grep -oE 'grpc-swift-protobuf", from: "[0-9.]+"' Package.swift | grep -oE '[0-9]+\.[0-9]+\.[0-9]+')
cat > "$plugins/Package.swift" <<SWIFT
// swift-tools-version: 6.1
// Written by scripts/generate-protos.sh: builds the protoc plugins only.
import PackageDescription
let package = Package(
    name: "protoc-plugins",
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf", exact: "$protobuf"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf", exact: "$grpc_protobuf"),
    ],
    targets: []
)
SWIFT
swift build --package-path "$plugins" -c release --product protoc-gen-swift
swift build --package-path "$plugins" -c release --product protoc-gen-grpc-swift-2
bin=$(swift build --package-path "$plugins" -c release --show-bin-path)

out=Shared/IsletProtos
protoc \
  --plugin=protoc-gen-swift="$bin/protoc-gen-swift" \
  --plugin=protoc-gen-grpc-swift="$bin/protoc-gen-grpc-swift-2" \
  --swift_out="$out" --swift_opt=Visibility=Public \
  --grpc-swift_out="$out" --grpc-swift_opt=Visibility=Public \
  -I "$out" "$out"/*.proto
echo "generated into $out:"; ls "$out"/*.swift
