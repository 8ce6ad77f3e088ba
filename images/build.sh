#!/bin/bash
# `make images`: build both plugin images offline with podman (vfs storage, no daemon, no
# registry) from images/*.Containerfile, and print their sizes.
#
#   images/build.sh BUILD_DIR
#
# Image store: BUILD_DIR/podman/{root,runroot} (IMAGE_ROOT overrides the parent directory);
# `make test-runtime` runs the images from the same store. Tags:
#   localhost/hyperlight-device-plugin:VERSION   FROM scratch: the musl binary and musl's
#                                                loader/libc (scripts/build-static.sh)
#   localhost/kata-device-plugin:VERSION         FROM scratch: the static binary
#                                                (scripts/build-static.sh)
# OCI labels org.opencontainers.image.{version,revision,source}: VERSION from meson.build,
# the commit (git rev-parse HEAD, "-dirty" appended for a modified tree) and IMAGE_SOURCE
# (default: the git remote "origin", else the local repository path).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
store=${IMAGE_ROOT:-$build/podman}
PODMAN=(podman --root "$store/root" --runroot "$store/runroot" --storage-driver vfs
	--cgroup-manager cgroupfs --events-backend file --runtime runc)

version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$src/meson.build" | head -n1)
[ -n "$version" ] || { echo "images: no version in meson.build" >&2; exit 1; }
revision=$(git -C "$src" rev-parse HEAD)
git -C "$src" diff --quiet HEAD -- 2>/dev/null || revision="$revision-dirty"
source=${IMAGE_SOURCE:-$(git -C "$src" remote get-url origin 2>/dev/null || echo "file://$src")}
SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct)
export SOURCE_DATE_EPOCH

echo "== musl builds (scripts/build-static.sh)"
"$src/scripts/build-static.sh" "$src/build-static"
hctx=$src/build-static/image-context-hyperlight
kctx=$src/build-static/image-context-kata

build_one() { # NAME CONTEXT
	echo "== podman build localhost/$1:$version"
	"${PODMAN[@]}" build --quiet --pull=never --network=none \
		-f "$src/images/${1%%-*}.Containerfile" \
		--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source" \
		-t "localhost/$1:$version" "$2"
}
build_one hyperlight-device-plugin "$hctx"
build_one kata-device-plugin "$kctx"
"${PODMAN[@]}" image prune -f >/dev/null

echo "== images (store $store)"
for n in hyperlight-device-plugin kata-device-plugin; do
	ref=localhost/$n:$version
	size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$ref")
	labels=$("${PODMAN[@]}" image inspect --format \
		'version={{index .Labels "org.opencontainers.image.version"}} revision={{index .Labels "org.opencontainers.image.revision"}} source={{index .Labels "org.opencontainers.image.source"}}' "$ref")
	awk -v r="$ref" -v s="$size" -v l="$labels" 'BEGIN { printf "%-44s %6.1f MB (%d bytes) %s\n", r, s / 1e6, s, l }'
done
