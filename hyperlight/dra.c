/* SPDX-License-Identifier: Apache-2.0 */
/* dra: the hypervisor as one shared DRA device (dra.h). */
#include "dra.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp/buf.h"
#include "dp/draside.h"
#include "dp/log.h"

struct hl_dra {
	struct hl_config cfg;
	struct hl_device dev;
	dp_draside *side;
	bool has_verdict, healthy;
	char reason[256];
	char tainted_at[32]; /* RFC 3339, the episode's first unhealthy verdict; "" while healthy */
};

void hl_dra_quantity(uint64_t v, char *buf, size_t size)
{
	static const char suffix[] = { 'k', 'M', 'G', 'T', 'P', 'E' };
	int e = 0;

	while (v && v % 1000 == 0 && e < (int)sizeof(suffix)) {
		v /= 1000;
		e++;
	}
	if (e)
		snprintf(buf, size, "%llu%c", (unsigned long long)v, suffix[e - 1]);
	else
		snprintf(buf, size, "%llu", (unsigned long long)v);
}

static void attr(dp_buf *b, const char *name, const char *value, bool comma)
{
	dp_buf_json_string(b, name);
	dp_buf_puts(b, ":{\"string\":");
	dp_buf_json_string(b, value);
	dp_buf_puts(b, comma ? "}," : "}");
}

static void render(const hl_dra *d, dp_buf *b)
{
	char count[32];

	hl_dra_quantity(d->cfg.device_count, count, sizeof(count));
	dp_buf_puts(b, "{\"devices\":[{\"name\":");
	dp_buf_json_string(b, d->dev.name);
	dp_buf_puts(b, ",\"attributes\":{");
	attr(b, "type", "hypervisor", true);
	attr(b, "hypervisor", d->dev.name, true);
	attr(b, "path", d->dev.path, false);
	dp_buf_printf(b, "},\"allowMultipleAllocations\":true,\"capacity\":{\"" HL_DRA_CAPACITY "\":{\"value\":\"%s\","
		      "\"requestPolicy\":{\"default\":\"1\",\"validRange\":{\"min\":\"1\"}}}}", count);
	if (d->tainted_at[0])
		dp_buf_printf(b, ",\"taints\":[{\"key\":\"" HL_DRA_TAINT "\",\"effect\":\"NoSchedule\",\"timeAdded\":\"%s\"}]",
			      d->tainted_at);
	dp_buf_puts(b, "}]}\n");
}

void hl_dra_verdict(bool healthy, const char *reason, void *userdata)
{
	hl_dra *d = userdata;
	_cleanup_(dp_buf_done) dp_buf b = { 0 };

	d->has_verdict = true;
	d->healthy = healthy;
	snprintf(d->reason, sizeof(d->reason), "%s", reason ? reason : "");
	if (healthy) {
		d->tainted_at[0] = '\0';
	} else if (!d->tainted_at[0]) {
		time_t now = time(NULL);
		struct tm tm;
		if (!gmtime_r(&now, &tm) || strftime(d->tainted_at, sizeof(d->tainted_at), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
			snprintf(d->tainted_at, sizeof(d->tainted_at), "1970-01-01T00:00:00Z"); /* not reached */
	}
	render(d, &b);
	if (!b.oom)
		(void)dp_draside_publish(d->side, b.data, b.len); /* a failure is logged there */
	dp_draside_health h = { .device = d->dev.name, .healthy = healthy, .message = d->reason };
	(void)dp_draside_set_health(d->side, &h, 1); /* -ENOMEM: the next check reports it */
}

static int resolve(const char *device, char *cdi, size_t size, char *why, size_t why_size, void *userdata)
{
	hl_dra *d = userdata;

	if (strcmp(device, d->dev.name) != 0) {
		snprintf(why, why_size, "no such device on this node (its hypervisor is %s)", d->dev.name);
		return -ENODEV;
	}
	if (!d->has_verdict || !d->healthy) {
		snprintf(why, why_size, "device %s is unusable: %s", device, d->has_verdict ? d->reason : "not checked yet");
		return -EIO;
	}
	snprintf(cdi, size, "%s=%s", HL_RESOURCE, d->dev.name);
	return 0;
}

int hl_dra_new(dp_loop *loop, const struct hl_config *cfg, const struct hl_device *dev, const char *exe, hl_dra **ret,
	       char *why, size_t why_size)
{
	_cleanup_(hl_dra_freep) hl_dra *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->dev = *dev;
	if ((r = dp_draside_new_in_pod(loop, HL_DRA_DRIVER, exe, resolve, d, &d->side, why, why_size)) < 0)
		// cppcheck-suppress memleak ; d is freed by its _cleanup_ attribute, which the analyzers do not model
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	*ret = TAKE_PTR(d);
	return 0;
}

hl_dra *hl_dra_free(hl_dra *d)
{
	if (!d)
		return NULL;
	dp_draside_free(d->side);
	free(d);
	return NULL;
}

int hl_dra_exe_fd(const hl_dra *d)
{
	return d ? dp_draside_exe_fd(d->side) : -1;
}
