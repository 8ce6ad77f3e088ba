/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-kvm-run: the proof a workload gives that its /dev/kvm is a working hypervisor, not only a
 * node that opens. It creates a VM with one vCPU, gives it a page of guest memory holding a few
 * instructions, and runs it to the exits those instructions must cause:
 *
 *   x86-64 (real mode):  mov $0x2a,%al; out %al,$0x10; hlt
 *                        -> KVM_EXIT_IO (out, port 0x10, 1 byte 0x2a), then KVM_EXIT_HLT
 *   arm64 (EL1, MMU off): mov w0,#0x2a; mov x1,#0x10; strb w0,[x1]; PSCI SYSTEM_OFF (hvc)
 *                        -> KVM_EXIT_MMIO (write, address 0x10, 1 byte 0x2a), then
 *                           KVM_EXIT_SYSTEM_EVENT (shutdown)
 *
 * Usage: sdp-kvm-run [DEVICE]   (default /dev/kvm)
 *
 * Success: one line on stdout, exit 0:
 *   sdp-kvm-run: ok api=12 exits=io(port=0x10,value=0x2a),hlt uid=65534 gid=65534
 *   sdp-kvm-run: ok api=12 exits=mmio(addr=0x10,value=0x2a),system-event(shutdown) uid=... gid=...
 * Failure: one line on stderr, exit 1:
 *   sdp-kvm-run: FAIL <step>: <reason>
 * with step one of open, api-version, ipa-size (arm64), create-vm, memory, create-vcpu, vcpu-mmap,
 * vcpu-init (arm64), sregs (x86-64), regs, run, unexpected-exit. Another architecture: exit 2.
 *
 * KVM_CREATE_VM's argument is 0 except on arm64, where it is the VM's IPA size: a host whose
 * limit (KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE)) is below the default's 40 bits refuses 0
 * with EINVAL ("using unsupported default IPA limit"), so there the VM asks for the limit (the
 * guest's memory and MMIO address sit far below 32 bits). The ok line then ends " ipa=36".
 *
 * Only libc and the kernel's UAPI headers; built static (build.sh). The device is opened with
 * O_CLOEXEC; the VM and vCPU descriptors KVM returns carry O_CLOEXEC from the kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define PROG "sdp-kvm-run"
#define GUEST_ADDR 0x10000u /* guest physical address of the memory slot */
#define GUEST_SIZE 0x10000u /* 64 KiB: a multiple of every host page size */
#define OUT_ADDR 0x10u /* x86-64: the I/O port; arm64: the MMIO address (no memory there) */
#define OUT_VALUE 0x2au
#define MAX_RUNS 16 /* KVM_RUN calls for one exit, retried on EINTR and EAGAIN only */
#define DEFAULT_IPA_BITS 40 /* arm64: the IPA size of KVM_CREATE_VM(0) (KVM_PHYS_SHIFT) */

struct vm {
	int kvm, fd, vcpu; /* the device, the VM, its vCPU */
	int api;
	int ipa; /* arm64: the IPA size asked for when below the default, else 0 */
	uint8_t *mem;
	struct kvm_run *run;
	size_t run_size;
};

/* fail: the failure line for STEP with ERR's text; the exit code 1. */
static int fail(const char *step, int err)
{
	fprintf(stderr, PROG ": FAIL %s: %s\n", step, strerror(err));
	return 1;
}

/* vm_type: KVM_CREATE_VM's argument; arm64: 0 (40 bits) unless the host's IPA limit is lower,
 * then KVM_VM_TYPE_ARM_IPA_SIZE(limit) (v->ipa set). 0 or the failure's exit code in *rc. */
static unsigned long vm_type(struct vm *v, int *rc)
{
#if defined(__aarch64__)
	int limit = ioctl(v->kvm, KVM_CHECK_EXTENSION, KVM_CAP_ARM_VM_IPA_SIZE);

	*rc = 0;
	if (limit < 0) {
		*rc = fail("ipa-size", errno);
		return 0;
	}
	if (limit > 0 && limit < DEFAULT_IPA_BITS) {
		v->ipa = limit;
		return KVM_VM_TYPE_ARM_IPA_SIZE((unsigned long)limit);
	}
#else
	(void)v;
	*rc = 0;
#endif
	return 0;
}

static int open_device(struct vm *v, const char *path)
{
	unsigned long type;
	int rc;

	int api;

	v->kvm = open(path, O_RDWR | O_CLOEXEC);
	if (v->kvm < 0)
		return fail("open", errno);
	api = ioctl(v->kvm, KVM_GET_API_VERSION, 0);
	if (api < 0)
		return fail("api-version", errno);
	if (api != KVM_API_VERSION) {
		fprintf(stderr, PROG ": FAIL api-version: %d, want %d\n", api, KVM_API_VERSION);
		return 1;
	}
	v->api = api;
	type = vm_type(v, &rc);
	if (rc != 0)
		return rc;
	v->fd = ioctl(v->kvm, KVM_CREATE_VM, type);
	if (v->fd < 0)
		return fail("create-vm", errno);
	return 0;
}

/* set_memory: GUEST_SIZE bytes at GUEST_ADDR holding CODE. */
static int set_memory(struct vm *v, const void *code, size_t len)
{
	struct kvm_userspace_memory_region region = { 0 };

	v->mem = mmap(NULL, GUEST_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (v->mem == MAP_FAILED) {
		v->mem = NULL;
		return fail("memory", errno);
	}
	memcpy(v->mem, code, len);
	region.slot = 0;
	region.guest_phys_addr = GUEST_ADDR;
	region.memory_size = GUEST_SIZE;
	region.userspace_addr = (uintptr_t)v->mem;
	if (ioctl(v->fd, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		return fail("memory", errno);
	return 0;
}

static int create_vcpu(struct vm *v)
{
	int size;
	void *run;

	v->vcpu = ioctl(v->fd, KVM_CREATE_VCPU, 0);
	if (v->vcpu < 0)
		return fail("create-vcpu", errno);
	size = ioctl(v->kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (size < 0)
		return fail("vcpu-mmap", errno);
	if ((size_t)size < sizeof(struct kvm_run)) {
		fprintf(stderr, PROG ": FAIL vcpu-mmap: size %d, want at least %zu\n", size,
			sizeof(struct kvm_run));
		return 1;
	}
	run = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, v->vcpu, 0);
	if (run == MAP_FAILED)
		return fail("vcpu-mmap", errno);
	v->run = run;
	v->run_size = (size_t)size;
	return 0;
}

/* run_once: KVM_RUN until it returns other than for a signal; 0 or the failure's exit code. */
static int run_once(struct vm *v)
{
	for (int i = 0; i < MAX_RUNS; i++) {
		if (ioctl(v->vcpu, KVM_RUN, 0) == 0)
			return 0;
		if (errno != EINTR && errno != EAGAIN)
			return fail("run", errno);
	}
	return fail("run", EINTR);
}

/* unexpected: the failure line for an exit the guest's code should not cause. */
static int unexpected(const struct kvm_run *run, const char *want)
{
	fprintf(stderr, PROG ": FAIL unexpected-exit: exit_reason=%u", run->exit_reason);
	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		fprintf(stderr, " io(direction=%u,size=%u,port=0x%x,count=%u)", run->io.direction,
			run->io.size, run->io.port, run->io.count);
		break;
	case KVM_EXIT_MMIO:
		fprintf(stderr, " mmio(addr=0x%llx,len=%u,is_write=%u)",
			(unsigned long long)run->mmio.phys_addr, run->mmio.len, run->mmio.is_write);
		break;
	case KVM_EXIT_FAIL_ENTRY:
		fprintf(stderr, " hardware_entry_failure_reason=0x%llx",
			(unsigned long long)run->fail_entry.hardware_entry_failure_reason);
		break;
	case KVM_EXIT_INTERNAL_ERROR:
		fprintf(stderr, " suberror=%u", run->internal.suberror);
		break;
	case KVM_EXIT_SYSTEM_EVENT:
		fprintf(stderr, " system_event.type=%u", run->system_event.type);
		break;
	default:
		break;
	}
	fprintf(stderr, ", want %s\n", want);
	return 1;
}

#if defined(__x86_64__)

/* mov $0x2a,%al; out %al,$0x10; hlt */
static const uint8_t guest_code[] = { 0xb0, OUT_VALUE, 0xe6, OUT_ADDR, 0xf4 };
static const char *const exits_ok = "io(port=0x10,value=0x2a),hlt";

/* set_vcpu: real mode, CS:IP = 0x1000:0 (GUEST_ADDR), the reserved flag bit only. */
static int set_vcpu(struct vm *v)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs = { 0 };

	if (ioctl(v->vcpu, KVM_GET_SREGS, &sregs) < 0)
		return fail("sregs", errno);
	sregs.cs.base = GUEST_ADDR;
	sregs.cs.selector = GUEST_ADDR >> 4;
	if (ioctl(v->vcpu, KVM_SET_SREGS, &sregs) < 0)
		return fail("sregs", errno);
	regs.rip = 0;
	regs.rflags = 0x2;
	if (ioctl(v->vcpu, KVM_SET_REGS, &regs) < 0)
		return fail("regs", errno);
	return 0;
}

/* first_exit: out %al,$0x10 with 0x2a. */
static int first_exit(const struct kvm_run *run)
{
	const uint8_t *data = (const uint8_t *)run + run->io.data_offset;

	if (run->exit_reason != KVM_EXIT_IO || run->io.direction != KVM_EXIT_IO_OUT ||
	    run->io.size != 1 || run->io.port != OUT_ADDR || run->io.count != 1)
		return unexpected(run, "io(out,port=0x10,size=1)");
	if (*data != OUT_VALUE) {
		fprintf(stderr, PROG ": FAIL unexpected-exit: io(port=0x10,value=0x%x), want value 0x2a\n",
			*data);
		return 1;
	}
	return 0;
}

static int last_exit(const struct kvm_run *run)
{
	if (run->exit_reason != KVM_EXIT_HLT)
		return unexpected(run, "hlt");
	return 0;
}

#elif defined(__aarch64__)

/*
 * mov w0,#0x2a; mov x1,#0x10; strb w0,[x1]; mov w0,#8; movk w0,#0x8400,lsl #16; hvc #0; b .
 * x0 = 0x84000008: PSCI 0.2 SYSTEM_OFF.
 */
static const uint32_t guest_code[] = { 0x52800540, 0xd2800201, 0x39000020, 0x52800100,
				       0x72b08000, 0xd4000002, 0x14000000 };
static const char *const exits_ok = "mmio(addr=0x10,value=0x2a),system-event(shutdown)";

/* set_vcpu: the preferred target with PSCI 0.2 (reset: EL1h, MMU off), PC at GUEST_ADDR. */
static int set_vcpu(struct vm *v)
{
	struct kvm_vcpu_init init;
	uint64_t pc = GUEST_ADDR;
	struct kvm_one_reg reg = {
		.id = KVM_REG_ARM64 | KVM_REG_SIZE_U64 | KVM_REG_ARM_CORE |
		      (offsetof(struct kvm_regs, regs.pc) / sizeof(uint32_t)),
		.addr = (uintptr_t)&pc,
	};

	memset(&init, 0, sizeof(init));
	if (ioctl(v->fd, KVM_ARM_PREFERRED_TARGET, &init) < 0)
		return fail("vcpu-init", errno);
	init.features[0] |= 1u << KVM_ARM_VCPU_PSCI_0_2;
	if (ioctl(v->vcpu, KVM_ARM_VCPU_INIT, &init) < 0)
		return fail("vcpu-init", errno);
	if (ioctl(v->vcpu, KVM_SET_ONE_REG, &reg) < 0)
		return fail("regs", errno);
	return 0;
}

/* first_exit: strb of 0x2a to 0x10, where no memory is. */
static int first_exit(const struct kvm_run *run)
{
	if (run->exit_reason != KVM_EXIT_MMIO || !run->mmio.is_write || run->mmio.len != 1 ||
	    run->mmio.phys_addr != OUT_ADDR)
		return unexpected(run, "mmio(write,addr=0x10,len=1)");
	if (run->mmio.data[0] != OUT_VALUE) {
		fprintf(stderr, PROG ": FAIL unexpected-exit: mmio(addr=0x10,value=0x%x), want value 0x2a\n",
			run->mmio.data[0]);
		return 1;
	}
	return 0;
}

static int last_exit(const struct kvm_run *run)
{
	if (run->exit_reason != KVM_EXIT_SYSTEM_EVENT ||
	    run->system_event.type != KVM_SYSTEM_EVENT_SHUTDOWN)
		return unexpected(run, "system-event(shutdown)");
	return 0;
}

#else

/* Another architecture: main says so before anything runs (these keep the rest compiled). */
#define UNSUPPORTED 1
static const uint8_t guest_code[] = { 0 };
static const char *const exits_ok = "";

static int set_vcpu(struct vm *v)
{
	(void)v;
	return 2;
}

static int first_exit(const struct kvm_run *run)
{
	return unexpected(run, "nothing");
}

static int last_exit(const struct kvm_run *run)
{
	return unexpected(run, "nothing");
}

#endif

/* run_guest: every step, from the device to the last exit. */
static int run_guest(struct vm *v, const char *path)
{
	int rc = open_device(v, path);

	if (rc == 0)
		rc = set_memory(v, guest_code, sizeof(guest_code));
	if (rc == 0)
		rc = create_vcpu(v);
	if (rc == 0)
		rc = set_vcpu(v);
	if (rc == 0)
		rc = run_once(v);
	if (rc == 0)
		rc = first_exit(v->run);
	if (rc == 0)
		rc = run_once(v);
	if (rc == 0)
		rc = last_exit(v->run);
	return rc;
}

static void release(struct vm *v)
{
	if (v->run)
		(void)munmap(v->run, v->run_size);
	if (v->mem)
		(void)munmap(v->mem, GUEST_SIZE);
	if (v->vcpu >= 0)
		(void)close(v->vcpu);
	if (v->fd >= 0)
		(void)close(v->fd);
	if (v->kvm >= 0)
		(void)close(v->kvm);
}

int main(int argc, char **argv)
{
	struct vm v = { .kvm = -1, .fd = -1, .vcpu = -1 };
	const char *path = argc > 1 ? argv[1] : "/dev/kvm";
	int rc;

#ifdef UNSUPPORTED
	fprintf(stderr, PROG ": FAIL unsupported architecture\n");
	return 2;
#endif
	if (argc > 2) {
		fprintf(stderr, "usage: " PROG " [DEVICE]\n");
		return 2;
	}
	rc = run_guest(&v, path);
	release(&v);
	if (rc != 0)
		return rc;
	if (printf(PROG ": ok api=%d exits=%s uid=%u gid=%u", v.api, exits_ok, (unsigned)getuid(),
		   (unsigned)getgid()) < 0 ||
	    (v.ipa && printf(" ipa=%d", v.ipa) < 0) || printf("\n") < 0 ||
	    fflush(stdout) != 0)
		return fail("output", errno);
	return 0;
}
