/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe: the hypervisor usability probe. It runs inside the core's helper child (dp/helper.h),
 * so a probe stuck in the kernel costs a child process, never the daemon. The daemon calls
 * dp_helper_main(argc, argv, hl_probe_helpers, hl_probe_n_helpers) first in main() and asks
 * for one of these entries (argv after DP_HELPER_ARG):
 *
 *   probe-kvm   <device path>
 *   probe-mshv  <device path>
 *   check-host  <host node path> <major> <minor>
 *   probe       kvm|mshv|tun|vhost-net|vhost-vsock <device path> [<host node path> <major> <minor>]
 *
 * "probe" is one health check: the host-node check first (when its three arguments are given),
 * then the device probe. Each entry answers "ok <detail>" or "fail <reason>"; the reasons are
 * meant for an operator's log line, e.g.
 *   EACCES opening /dev/kvm                  open(2) failed (errno name, then the path)
 *   KVM_GET_API_VERSION: ENOTTY              an ioctl failed
 *   API version 11                           KVM_GET_API_VERSION returned something else than 12
 *   KVM_CREATE_VM: ENOMEM
 *   KVM_CREATE_VM(IPA 36 bits): EINVAL       arm64, on a host whose IPA limit is below 40 bits
 *   KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE): EPERM   arm64 only
 *   MSHV_CREATE_PARTITION: EINVAL
 *   host device /host-dev/kvm missing
 *   host device /host-dev/kvm is not a character device
 *   host device /host-dev/kvm has device number 10:233, expected 10:232
 *   host device /host-dev/kvm: EACCES        stat(2) failed otherwise
 *   invalid probe arguments: ...             the argv given does not match the list above
 *   ENODEV opening /dev/vhost-net (no driver: module vhost_net not loaded?)   a companion
 *   ELOOP opening /dev/net/tun (a symbolic link, not the device node)
 *   host device /host-dev/vhost-net is a symbolic link, not the device node  a companion's
 *   TUNGETFEATURES: EBADFD, VHOST_GET_FEATURES: ENOTTY
 *   tun features 0x1: no tap devices (IFF_TAP)
 *
 * KVM: open O_RDWR|O_CLOEXEC, KVM_GET_API_VERSION == 12, KVM_CREATE_VM(type), close both. The
 * type is 0 (the kernel's default) except on arm64, where it is the VM's IPA size: there the
 * probe first asks KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE) for the host's limit, and on a
 * host whose limit is below the default's 40 bits (the kernel refuses KVM_CREATE_VM(0) there
 * with EINVAL) it asks for the limit instead (hl_kvm_vm_type); the reason then says so:
 * "KVM API version 12, VM created (IPA 36 bits, the host's limit)".
 * MSHV: open O_RDWR|O_CLOEXEC, MSHV_CREATE_PARTITION with the 16-byte non-isolated arguments
 * (flags 0: bit 3 clear, so the kernel's default CPU/XSAVE features; isolation 0), close the
 * partition without initialising it. No guest memory, no vCPU.
 * The companions (companion.h) are opened O_RDWR|O_CLOEXEC|O_NOFOLLOW (the node itself, never a
 * symlink; their host node is checked with lstat for the same reason):
 * tun: TUNGETFEATURES, which must include IFF_TAP ("tun features 0x7173 (tap, tun, no_pi,
 * vnet_hdr, multi_queue)"); no TUNSETIFF, so no interface is made and no capability needed.
 * vhost-net, vhost-vsock: VHOST_GET_FEATURES ("vhost-net features 0x..."), which needs no
 * VHOST_SET_OWNER: nothing is attached to the opened instance, it is released at close.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/helper.h"
#include "dp/seccomp.h"

#define HL_PROBE_HELPER "probe"	    /* the combined entry the daemon uses */
#define HL_KVM_API_VERSION 12
#define HL_KVM_DEFAULT_IPA_BITS 40 /* arm64: the IPA size of KVM_CREATE_VM(0) (KVM_PHYS_SHIFT) */

/* The hypervisor ioctls (three; arm64 adds KVM_CHECK_EXTENSION), as seccomp rules: the daemon's own list must allow them for the
 * probe helper, which inherits the daemon's filter (hyperlight/confine.c). */
extern const dp_seccomp_rule hl_probe_ioctl_rules[];
extern const size_t hl_probe_n_ioctl_rules;
/* The companions' ioctls (TUNGETFEATURES, VHOST_GET_FEATURES): the daemon's list adds them
 * only when COMPANIONS names one (the helper's own filter always has them). */
extern const dp_seccomp_rule hl_probe_companion_ioctl_rules[];
extern const size_t hl_probe_n_companion_ioctl_rules;

#define HL_PROBE_MAX_HELPERS 8 /* hl_probe_n_helpers is at most this */
extern const dp_helper_entry hl_probe_helpers[];
extern const size_t hl_probe_n_helpers;

/* The probe steps, usable in-process (the helper entries call them). Each returns 0, or a
 * negative errno with the reason (as listed above) in reason[size]:
 *   open/ioctl/stat failures: that call's -errno;
 *   "API version N": -EPROTO;
 *   "is not a character device": -ENOTTY; "has device number": -ENODEV; "no tap devices": -EPROTO;
 *   "is a symbolic link": -ELOOP;
 *   NULL path or reason, size 0: -EINVAL (reason untouched).
 * On success reason holds a short detail ("KVM API version 12, VM created"). */
int hl_probe_kvm(const char *path, char *reason, size_t size);
int hl_probe_mshv(const char *path, char *reason, size_t size);
int hl_probe_tun(const char *path, char *reason, size_t size);
int hl_probe_vhost_net(const char *path, char *reason, size_t size);
int hl_probe_vhost_vsock(const char *path, char *reason, size_t size);
/* nofollow: lstat (a companion's node), else stat. */
int hl_probe_host_node(const char *path, unsigned major, unsigned minor, bool nofollow, char *reason, size_t size);

/* KVM_CREATE_VM's argument on arm64 for a host whose KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE)
 * answered ipa_limit: 0 (the default, 40 bits) when the capability is absent (<= 0) or the limit
 * allows 40 bits, else KVM_VM_TYPE_ARM_IPA_SIZE(ipa_limit). Pure; every architecture. */
unsigned long hl_kvm_vm_type(int ipa_limit);
