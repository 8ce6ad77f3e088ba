/* SPDX-License-Identifier: Apache-2.0 */
/*
 * companion: the devices a micro-VM sandbox needs beside the hypervisor (COMPANIONS), each its
 * own counted resource under hyperlight.dev/ with its own CDI spec, probe and endpoint:
 *
 *   name         node            number  probe                 default resource
 *   tun          /dev/net/tun    10:200  TUNGETFEATURES        hyperlight.dev/tun
 *   vhost-net    /dev/vhost-net  10:238  VHOST_GET_FEATURES    hyperlight.dev/vhost-net
 *   vhost-vsock  /dev/vhost-vsock 10:241 VHOST_GET_FEATURES    hyperlight.dev/vhost-vsock
 *
 * The numbers are the kernel's fixed misc minors (TUN_MINOR, VHOST_NET_MINOR,
 * VHOST_VSOCK_MINOR in <linux/miscdevice.h>): a node with another number is not the device,
 * whatever its name. Unlike the hypervisor, a companion's node may be missing when the daemon
 * starts (its module not loaded): the daemon starts, advertises it Unhealthy with the reason,
 * and follows the node (Healthy within milliseconds of its return).
 *
 * The environment (read once at start):
 *   COMPANIONS            comma-separated names from the table, each at most once; unset or
 *                         empty: none (the default). Not with PLUGIN_API=dra.
 *   TUN_RESOURCE, VHOST_NET_RESOURCE, VHOST_VSOCK_RESOURCE
 *                         the resource's name under hyperlight.dev/ (default the companion's
 *                         name): lower-case letters, digits and '-', 1..63 bytes, starting and
 *                         ending with a letter or digit; never "hypervisor", "device-access",
 *                         "enabled", "device-plugin" or another companion's (hyperlight.dev/
 *                         <name> is also the companion's node label, labels.h).
 *   TUN_COUNT, VHOST_NET_COUNT, VHOST_VSOCK_COUNT
 *                         devices advertised (default 2000; 1..the gRPC message's ceiling)
 * A variable of a companion not listed is ignored.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HL_DOMAIN "hyperlight.dev"
#define HL_COMPANION_TYPES 3
#define HL_COMPANION_DEFAULT_COUNT 2000u
#define HL_COMPANION_NAME_MAX 63 /* the name part of a resource (a qualified name's) */
/* "hyperlight.dev/" + name + NUL */
#define HL_COMPANION_RESOURCE_SIZE (sizeof(HL_DOMAIN "/") + HL_COMPANION_NAME_MAX)

struct hl_companion_type {
	const char *name;  /* "tun": in COMPANIONS, the CDI device name, the probe's kind */
	const char *path;  /* "/dev/net/tun": in containers and on the host */
	const char *env;   /* "TUN": TUN_RESOURCE and TUN_COUNT */
	const char *id_prefix; /* "tun-": the device IDs tun-0, tun-1, ... */
	unsigned major, minor;
};

extern const struct hl_companion_type hl_companion_types[HL_COMPANION_TYPES];

struct hl_companion {
	const struct hl_companion_type *type;
	char resource[HL_COMPANION_RESOURCE_SIZE]; /* "hyperlight.dev/tun" */
	uint32_t count;
};

/* The companion named name, or NULL. */
const struct hl_companion_type *hl_companion_type(const char *name);
/* COMPANIONS parsed: a bit per hl_companion_types index in *ret_mask. Items are separated by
 * ',' and may have spaces or tabs around them; an empty list (or only blanks) is none. An
 * unknown, empty or repeated item: -EINVAL with a message naming it (and the valid names),
 * *ret_mask untouched. */
int hl_companions_parse(const char *list, unsigned *ret_mask, char *err, size_t errlen);
/* The name part of a resource as <ENV>_RESOURCE takes it (above): 0, or -EINVAL with a message
 * naming var and the value. */
int hl_companion_check_name(const char *var, const char *name, char *err, size_t errlen);
/* Read the environment (above) into ret[0..*ret_n), in the table's order. Errors: -EINVAL or
 * -ERANGE with the message in err (the daemon exits 1); ret and *ret_n untouched then. */
int hl_companions_load(struct hl_companion ret[HL_COMPANION_TYPES], size_t *ret_n, char *err, size_t errlen);
/* The CDI spec file of a companion: "hyperlight-<name part of its resource>.json". */
void hl_companion_cdi_file(const struct hl_companion *c, char *buf, size_t size);
