#!/bin/bash
# `make images`: build both plugin images offline with podman (vfs storage, no daemon, no
# registry) from images/*.Containerfile, for amd64 and arm64, join each pair in a manifest list,
# check their sizes and print them.
#
#   images/build.sh BUILD_DIR
#
# Image store: BUILD_DIR/podman/{root,runroot} (IMAGE_ROOT overrides the parent directory);
# `make test-runtime` runs the images from the same store. Tags, for NAME
# hyperlight-device-plugin and kata-device-plugin:
#   localhost/NAME:VERSION         a manifest list of linux/amd64 and linux/arm64 (podman
#                                  manifest): the tag the charts use, for both node kinds
#   localhost/NAME:VERSION-amd64   the two images the list holds; kept tagged so that
#   localhost/NAME:VERSION-arm64   `podman image prune` leaves them, and to run one architecture
#                                  by name (podman 4.3 runs a local list's image for the host's
#                                  architecture even with --arch or --platform)
#   hyperlight-device-plugin       FROM scratch: the musl binary, its API-server helper (node
#                                  labels, DRA) and
#                                  musl's loader/libc (scripts/build-static.sh)
#   kata-device-plugin             FROM scratch: the static binary and its static API-server
#                                  helper sdp-kube-api (PLUGIN_API=dra) (scripts/build-static.sh)
# The arm64 images are built from scripts/build-static.sh --arch arm64 (cross-compiled; the
# packages of scripts/install-deps.sh arm64): FROM scratch has no RUN step, so no emulation.
# Each image must stay within its bound, per architecture: 2 MiB each (`podman image inspect`
# Size); the script fails otherwise. kata's was 1 MiB until its DRA helper (Mbed TLS and
# jansson, about 650 KB static) joined the daemon (docs/benchmarks.md has the sizes).
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
ARCHES="amd64 arm64"
declare -A BOUND=([hyperlight-device-plugin]=$((2 << 20)) [kata-device-plugin]=$((2 << 20)))

version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$src/meson.build" | head -n1)
[ -n "$version" ] || { echo "images: no version in meson.build" >&2; exit 1; }
revision=$(git -C "$src" rev-parse HEAD)
git -C "$src" diff --quiet HEAD -- 2>/dev/null || revision="$revision-dirty"
source=${IMAGE_SOURCE:-$(git -C "$src" remote get-url origin 2>/dev/null || echo "file://$src")}
SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct)
export SOURCE_DATE_EPOCH

# The build contexts, per architecture: build-static/ (amd64), build-static-arm64/.
static_dir() { if [ "$1" = amd64 ]; then echo "$src/build-static"; else echo "$src/build-static-$1"; fi; }
for arch in $ARCHES; do
	echo "== musl builds, $arch (scripts/build-static.sh --arch $arch)"
	"$src/scripts/build-static.sh" --arch "$arch" "$(static_dir "$arch")"
done

build_one() { # NAME ARCH
	local ctx
	ctx=$(static_dir "$2")/image-context-${1%%-*}
	echo "== podman build --platform linux/$2 localhost/$1:$version-$2"
	"${PODMAN[@]}" build --quiet --pull=never --network=none --platform "linux/$2" \
		-f "$src/images/${1%%-*}.Containerfile" \
		--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source" \
		-t "localhost/$1:$version-$2" "$ctx"
}
# The lists are made afresh each time, after the builds and the prune: podman 4.3.1's `image
# prune` (and `podman images`) fail in a store that holds a manifest list made from local images
# (https://github.com/containers/podman/issues/19757: the list's own record lacks its images'
# manifests), so the previous lists (or, from before the lists, the images) under the names are
# removed first; the images the new builds untag go with the prune.
for n in hyperlight-device-plugin kata-device-plugin; do
	ref=localhost/$n:$version
	if "${PODMAN[@]}" manifest exists "$ref" 2>/dev/null; then
		"${PODMAN[@]}" manifest rm "$ref" >/dev/null
	elif "${PODMAN[@]}" image exists "$ref"; then
		"${PODMAN[@]}" untag "$ref" "$ref"
	fi
done
for n in hyperlight-device-plugin kata-device-plugin; do
	for arch in $ARCHES; do
		build_one "$n" "$arch"
	done
done
"${PODMAN[@]}" image prune -f >/dev/null
for n in hyperlight-device-plugin kata-device-plugin; do
	ref=localhost/$n:$version
	echo "== podman manifest create $ref, add $(for arch in $ARCHES; do printf '%s ' "$ref-$arch"; done)"
	"${PODMAN[@]}" manifest create "$ref" >/dev/null
	for arch in $ARCHES; do
		"${PODMAN[@]}" manifest add "$ref" "containers-storage:$ref-$arch" >/dev/null
	done
done

echo "== images (store $store)"
fail=0
for n in hyperlight-device-plugin kata-device-plugin; do
	ref=localhost/$n:$version
	# the list's platforms, in its order
	platforms=$("${PODMAN[@]}" manifest inspect "$ref" | python3 -c 'import json, sys
print(" ".join(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"]))')
	want=$(for arch in $ARCHES; do printf 'linux/%s ' "$arch"; done)
	if [ "$platforms" = "${want% }" ]; then
		echo "$ref: manifest list of $platforms"
	else
		echo "$ref: manifest list of '$platforms', want '${want% }'" >&2
		fail=1
	fi
	for arch in $ARCHES; do
		size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$ref-$arch")
		got=$("${PODMAN[@]}" image inspect --format '{{.Os}}/{{.Architecture}}' "$ref-$arch")
		labels=$("${PODMAN[@]}" image inspect --format \
			'version={{index .Labels "org.opencontainers.image.version"}} revision={{index .Labels "org.opencontainers.image.revision"}} source={{index .Labels "org.opencontainers.image.source"}}' "$ref-$arch")
		awk -v r="$ref-$arch" -v s="$size" -v b="${BOUND[$n]}" -v l="$labels" -v p="$got" \
			'BEGIN { printf "  %-44s %s %6.1f MB (%d bytes, bound %d MiB) %s\n", r, p, s / 1e6, s, b / 1048576, l }'
		if [ "$got" != "linux/$arch" ]; then
			echo "images: $ref-$arch is $got, want linux/$arch" >&2
			fail=1
		fi
		if [ "$size" -gt "${BOUND[$n]}" ]; then
			echo "images: $ref-$arch is $size bytes, over its bound of $((BOUND[$n] >> 20)) MiB" >&2
			fail=1
		fi
	done
done
if [ "$fail" -ne 0 ]; then
	echo "images: FAILED (above)" >&2
	exit 1
fi
echo "images: 2 manifest lists (linux/amd64, linux/arm64), 4 images, each within its bound (2 MiB)"
