#!/bin/bash
# Build (or find in the cache) the binaries of make cluster, from three of the Go modules beside
# this script, each pinned by its go.mod and go.sum:
#   kube/        sdp-kube: ONE multicall binary linking kube-apiserver, kube-controller-manager,
#                kube-scheduler, kubelet, kube-proxy, kubectl (k8s.io/kubernetes v1.37.2, its
#                staging modules at v0.37.2) and etcd (go.etcd.io/etcd/server/v3 v3.7.0, the
#                version 1.37.2 is tested with); symlinks of those names point at it.
#                Static (CGO_ENABLED=0), as the release builds them.
#   kube-v1.34/  instead of kube/ when K8S_VERSION=v1.34.4 (lib.sh kube_release): the same
#                sources for k8s.io/kubernetes v1.34.4 (staging modules at v0.34.4), etcd v3.6.4.
#   containerd/  containerd, ctr, containerd-shim-runc-v2 (github.com/containerd/containerd/v2
#                v2.4.2, its own dependency versions); CGO_ENABLED=0, without the btrfs, devmapper
#                and zfs snapshotters and the OTLP exporter (build tags).
#   runc/        runc (github.com/opencontainers/runc v1.5.3), cgo with Debian's libseccomp.
# Each is kept outside the checkout in CACHE/bin/<module>-<key>/, key = sha256 of the module's
# go.mod, go.sum and sources, the build flags below, the Go version and this recipe's version: a
# second run builds nothing. The module cache (GOMODCACHE, CACHE/go/mod: module@version paths) and
# the build cache (GOCACHE, CACHE/go/build-<go version>: content-addressed) stay there too, so a
# version bump recompiles only what changed. Older keys of a module (but those a running cluster
# uses) are removed when a new one is built; another module's never (kube-v1.34-<key> is not an
# older key of kube).
#
# Usage: cluster/build.sh       prints the directory holding every binary (symlinks), its only
#                               stdout: CACHE/bin/cluster-<key> (cluster-v1.34-<key> for
#                               v1.34.4); the steps and their times go to stderr and to
#                               CACHE/timings.log.
# K8S_VERSION: the Kubernetes release, v1.37.2 (default) or v1.34.4 (lib.sh kube_release).
# SDP_CLUSTER_CACHE: the cache (default /var/cache/sdp-cluster).
# GO: the go command (default: go on PATH, or /usr/local/go/bin/go when that one is newer).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster/lib.sh
. "$here/lib.sh" # CONTAINERD_VERSION, kube_release: from the modules' go.mod
recipe=1 # bump when the steps below change what gets built
cache=${SDP_CLUSTER_CACHE:-/var/cache/sdp-cluster}

say() { echo "cluster/build: $*" >&2; }
die() { say "$*"; exit 1; }

# --- the Go toolchain: the modules want go 1.26 (k8s.io/kubernetes v1.37.2: go 1.26.0,
# containerd v2.4.2: go 1.26.6). Debian 12's golang-go is 1.19.
gover() { "$1" env GOVERSION 2>/dev/null || true; }
vernum() { # go1.26.8 -> 1026008
	local v=${1#go} a b c
	IFS=. read -r a b c <<<"$v"
	c=${c%%[!0-9]*}
	echo $((a * 1000000 + ${b%%[!0-9]*} * 1000 + ${c:-0}))
}
if [ -z "${GO:-}" ]; then
	GO=$(command -v go || true)
	if [ -x /usr/local/go/bin/go ] && { [ -z "$GO" ] ||
		[ "$(vernum "$(gover /usr/local/go/bin/go)")" -gt "$(vernum "$(gover "$GO" || echo go0.0)")" ]; }; then
		GO=/usr/local/go/bin/go
	fi
fi
[ -n "$GO" ] && [ -x "$GO" ] || die "no go command: install Go >= 1.26 (https://go.dev/dl) or set GO=/path/to/go"
goversion=$(gover "$GO")
[ -n "$goversion" ] || die "$GO does not run"
if [ "$(vernum "$goversion")" -lt 1026006 ]; then
	if [ "$(vernum "$goversion")" -ge 1021000 ]; then
		# Go 1.21+ fetches the toolchain named here as a module through GOPROXY.
		export GOTOOLCHAIN=go1.26.8
		say "$GO is $goversion: building with GOTOOLCHAIN=$GOTOOLCHAIN (fetched as a module through the Go module proxy)"
		goversion=$(GOTOOLCHAIN=$GOTOOLCHAIN "$GO" env GOVERSION) || die "cannot get $GOTOOLCHAIN"
	else
		die "$GO is $goversion: Go >= 1.26.6 is needed (Debian 12's golang-go is 1.19); install Go from https://go.dev/dl or set GO="
	fi
else
	export GOTOOLCHAIN=local
fi

mkdir -p "$cache/go/mod" "$cache/bin"
cache=$(cd "$cache" && pwd)
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build-$goversion"
export GOFLAGS="-mod=readonly -modcacherw -trimpath -buildvcs=false" GO111MODULE=on GOWORK=off
[ -n "${GOPROXY:-}" ] || export GOPROXY=https://proxy.golang.org,direct
# One build at a time per cache (two worktrees running make cluster at once).
exec 9>"$cache/.lock"
flock 9
# what an interrupted build left (only one build runs at a time: the lock)
rm -rf "$cache/bin/"*.tmp.* "$cache"/.times.*

# CPU seconds (user + system) of this script's finished children so far, from bash's `times`
# (run in this shell, not a subshell, whose children are not ours): into CPU.
cpu_now() {
	times >"$cache/.times.$$"
	CPU=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%d", t }' "$cache/.times.$$")
	rm -f "$cache/.times.$$"
}
log_time() { # MODULE STEP SECONDS CPU_SECONDS
	say "$1: $2 $3 s ($4 CPU s)"
	echo "$(date -u +%FT%TZ) $goversion $1 $2 $3 s, $4 CPU s (load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs)" >>"$cache/timings.log"
}

kube_release # KUBE_MODULE and K8S_VERSION: the release K8S_VERSION names, or the default
[ -n "$K8S_VERSION" ] && [ -n "$CONTAINERD_VERSION" ] || die "no k8s.io/kubernetes or containerd version in cluster/*/go.mod"
kv=k8s.io/component-base/version
k8s_minor=${K8S_VERSION#v1.}
k8s_minor=${k8s_minor%%.*}
# as the release stamps its binaries (hack/lib/version.sh), but for the commit and build date
KUBE_LDFLAGS="-s -w -X $kv.gitVersion=$K8S_VERSION -X $kv.gitMajor=1 -X $kv.gitMinor=$k8s_minor -X $kv.gitTreeState=clean"
CTRD_TAGS="no_btrfs no_devmapper no_zfs no_tracing urfave_cli_no_docs"
cv=github.com/containerd/containerd/v2/version
CTRD_LDFLAGS="-s -w -X $cv.Version=$CONTAINERD_VERSION -X $cv.Package=github.com/containerd/containerd/v2"
RUNC_TAGS="seccomp urfave_cli_no_docs"
RUNC_LDFLAGS="-s -w"

# key MODULE FLAGS...: the cache key of a module's build.
key() {
	local m=$1
	shift
	(cd "$here/$m" && cat go.mod go.sum $(ls ./*.go 2>/dev/null) && echo "$* $goversion recipe $recipe") |
		sha256sum | cut -c1-16
}

# check_pins MODULE RELEASE MODULES_FILE: every module a package of the build comes from has the
# version RELEASE's own go.mod pins, where that go.mod names it (k8s.io/kubernetes's staging
# modules, v0.0.0 there, are replaced by the published v0.37.2 or v0.34.4: not compared). A version bump
# that moves a dependency of the release stops here.
check_pins() {
	local m=$1 rel=$2 list=$3 gomod diffs
	gomod=$("$GO" mod download -json "$rel@$(awk -v r="$rel" '$1 == r {print $2}' "$list")" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])') || die "$m: cannot find $rel's go.mod"
	diffs=$(join "$list" <(awk '/^\t/ && NF >= 2 && $1 !~ /=>/ && $2 ~ /^v/ {print $1, $2}' "$gomod" | sort) |
		awk '$2 != $3 && $3 != "v0.0.0" {print "  " $1 ": " $2 " here, " $3 " in the release"}')
	[ -z "$diffs" ] || die "$m: the build list moves dependencies pinned by $rel:
$diffs"
	say "$m: $(wc -l <"$list") modules, each at the version $rel pins where it names it"
}

# build MODULE KEY RELEASE CGO TAGS LDFLAGS EXTRA_BUILD_FLAGS PACKAGES...: into CACHE/bin/MODULE-KEY.
build() {
	local m=$1 k=$2 rel=$3 cgo=$4 tags=$5 ldflags=$6 extra=$7 dir tmp start cpu
	shift 7
	dir="$cache/bin/$m-$k"
	[ -f "$dir/.complete" ] && { say "$m: cached in $dir"; return 0; }
	tmp="$dir.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	cd "$here/$m"
	start=$(date +%s)
	cpu_now
	cpu=$CPU
	# Fetch exactly the modules these packages need (module zips into GOMODCACHE).
	if ! CGO_ENABLED=$cgo "$GO" list -deps -tags "$tags" -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' "$@" \
		2>"$tmp/download.log" | sort -u | grep . >"$tmp/modules"; then
		cat "$tmp/download.log" >&2
		rm -rf "$tmp"
		die "$m: downloading the modules failed (GOPROXY=$GOPROXY)"
	fi
	cpu_now
	log_time "$m" "module download" $(($(date +%s) - start)) $((CPU - cpu))
	check_pins "$m" "$rel" "$tmp/modules"
	start=$(date +%s)
	cpu_now
	cpu=$CPU
	# shellcheck disable=SC2086
	if ! CGO_ENABLED=$cgo "$GO" build -tags "$tags" -ldflags "$ldflags" $extra -o "$tmp/" "$@" 2>"$tmp/build.log"; then
		cat "$tmp/build.log" >&2
		rm -rf "$tmp"
		die "$m: go build failed (above)"
	fi
	cpu_now
	log_time "$m" "build" $(($(date +%s) - start)) $((CPU - cpu))
	rm -f "$tmp/download.log" "$tmp/build.log" "$tmp/modules"
	touch "$tmp/.complete"
	# older keys of this module go (only MODULE-<key>: kube-v1.34-<key> is another module's)
	for old in "$cache/bin/$m"-*; do
		is_key "$m" "$old" && [ "$old" != "$dir" ] && [ -d "$old" ] && ! kept "$old" && rm -rf "$old"
	done
	rm -rf "$dir"
	mv "$tmp" "$dir"
	cd "$here"
}

# What a running cluster uses (STATE/bin links to its set, whose links name the module
# directories) is never removed as an older key: its processes, make cluster-down and
# make test-cluster run those binaries until make cluster-down.
keep=" "
if [ -L "$STATE/bin" ]; then
	inuse=$(readlink "$STATE/bin")
	keep+="$inuse "
	for f in sdp-kube containerd runc; do
		t=$(readlink "$inuse/$f" 2>/dev/null) && keep+="$(dirname "$t") "
	done
fi
kept() { [[ $keep == *" $1 "* ]]; }
# is_key NAME PATH: PATH is CACHE/bin/NAME-<key> (16 hex digits), so not another name's
# (kube-v1.34-<key> for kube) nor an interrupted build's (.tmp.<pid>).
is_key() { [[ ${2##*/} == "$1"-* && ${2##*/"$1"-} =~ ^[0-9a-f]{16}$ ]]; }

kube_key=$(key "$KUBE_MODULE" "$KUBE_LDFLAGS")
ctrd_key=$(key containerd "$CTRD_TAGS $CTRD_LDFLAGS")
runc_key=$(key runc "$RUNC_TAGS $RUNC_LDFLAGS pie")

build "$KUBE_MODULE" "$kube_key" k8s.io/kubernetes 0 "" "$KUBE_LDFLAGS" "" .
build containerd "$ctrd_key" github.com/containerd/containerd/v2 0 "$CTRD_TAGS" "$CTRD_LDFLAGS" "" \
	github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/ctr \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
# runc: cgo for its nsenter C code and libseccomp (Debian's libseccomp-dev); as runc's own
# Makefile: PIE, tags seccomp (libpathrs left out: a Rust library Debian 12 does not ship).
command -v gcc >/dev/null || die "gcc missing (scripts/install-deps.sh)"
pkg-config --exists libseccomp 2>/dev/null || die "libseccomp-dev missing (scripts/install-deps.sh cluster)"
build runc "$runc_key" github.com/opencontainers/runc 1 "$RUNC_TAGS" "$RUNC_LDFLAGS" "-buildmode=pie" github.com/opencontainers/runc

# One directory with every binary by its name: cluster-<key> for cluster/kube's release,
# cluster-v1.34-<key> for cluster/kube-v1.34's (each release's older sets go, not the other's).
set_name=cluster${KUBE_MODULE#kube}
set_dir="$cache/bin/$set_name-$(echo "$kube_key $ctrd_key $runc_key" | sha256sum | cut -c1-16)"
if [ ! -f "$set_dir/.complete" ]; then
	for old in "$cache/bin/$set_name"-*; do is_key "$set_name" "$old" && [ -d "$old" ] && ! kept "$old" && rm -rf "$old"; done
	mkdir -p "$set_dir"
	# The multicall binary (go build names it after the last element of its module path: kube,
	# kube-v1.34) and its names.
	kube_bin=$(awk '$1 == "module" {n = split($2, p, "/"); print p[n]; exit}' "$here/$KUBE_MODULE/go.mod")
	ln -sfn "$cache/bin/$KUBE_MODULE-$kube_key/$kube_bin" "$set_dir/sdp-kube"
	for n in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd; do
		ln -sfn sdp-kube "$set_dir/$n"
	done
	for n in containerd ctr containerd-shim-runc-v2; do
		ln -sfn "$cache/bin/containerd-$ctrd_key/$n" "$set_dir/$n"
	done
	ln -sfn "$cache/bin/runc-$runc_key/runc" "$set_dir/runc"
	touch "$set_dir/.complete"
fi
echo "$set_dir"
