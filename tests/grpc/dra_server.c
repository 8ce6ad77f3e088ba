/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dra_server: the core's DRA service (dp/dra.h) with a scripted driver, for the grpc-go tests in
 * tests/kubelet/grpcpeer (dra_test.go; found through SDP_BUILD_DIR/tests/grpc/dra_server).
 *
 *   dra_server SOCKET
 *
 * The driver answers each claim by its name:
 *   fail-*   the error "refused <name>"
 *   later-*  after 50 ms (a loop timer): as below
 *   hold-*   never: only its cancel ends it
 *   share-*  one device with share ID "share-<uid>"
 *   other    one device: pool "node-a", device <name>, request "req", CDI IDs
 *            "example.com/dev=<name>" and "example.com/dev=common"
 * NodeUnprepareResources: fail-* refused, others done, at once. Prints (stdout, flushed)
 * "prepare <ns>/<name> <uid>", "unprepare <ns>/<name> <uid>", "cancel <uid>". SIGTERM/SIGINT:
 * dp_dra_free, exit 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/dra.h"
#include "dp/log.h"
#include "dp/loop.h"

struct later {
	dp_dra_claim *claim;
	dp_source *timer;
	struct later *next;
};

static dp_loop *loop;
static struct later *laters;

static void answer(dp_dra_claim *c)
{
	const char *name = dp_dra_claim_name(c);
	char dev[300], share[300], err[300];
	const char *reqs[] = { "req" };
	const char *cdi[] = { dev, "example.com/dev=common" };
	dp_dra_device d = { .pool = "node-a", .device = name, .requests = reqs, .n_requests = 1,
			    .cdi_ids = cdi, .n_cdi_ids = 2 };

	if (strncmp(name, "fail-", 5) == 0) {
		snprintf(err, sizeof(err), "refused %s", name);
		dp_dra_done(c, NULL, 0, err);
		return;
	}
	snprintf(dev, sizeof(dev), "example.com/dev=%s", name);
	if (strncmp(name, "share-", 6) == 0) {
		snprintf(share, sizeof(share), "share-%s", dp_dra_claim_uid(c));
		d.share_id = share;
	}
	dp_dra_done(c, &d, 1, NULL);
}

static int on_later(dp_source *s, void *userdata)
{
	struct later *l = userdata, **p;
	for (p = &laters; *p != l; p = &(*p)->next)
		;
	*p = l->next;
	answer(l->claim);
	dp_source_free(l->timer);
	free(l);
	return 0;
}

static void say(const char *what, dp_dra_claim *c)
{
	printf("%s %s/%s %s\n", what, dp_dra_claim_namespace(c), dp_dra_claim_name(c), dp_dra_claim_uid(c));
	fflush(stdout);
}

static void prepare(dp_dra_claim *c, void *userdata)
{
	const char *name = dp_dra_claim_name(c);
	say("prepare", c);
	if (strncmp(name, "hold-", 5) == 0)
		return;
	if (strncmp(name, "later-", 6) == 0) {
		struct later *l = calloc(1, sizeof(*l));
		if (l && dp_timer_add(loop, 50 * 1000, 0, on_later, l, &l->timer) == 0) {
			l->claim = c;
			l->next = laters;
			laters = l;
			return;
		}
		free(l);
	}
	answer(c);
}

static void unprepare(dp_dra_claim *c, void *userdata)
{
	say("unprepare", c);
	if (strncmp(dp_dra_claim_name(c), "fail-", 5) == 0)
		dp_dra_done(c, NULL, 0, "cannot unprepare");
	else
		dp_dra_done(c, NULL, 0, NULL);
}

static void cancel(dp_dra_claim *c, void *userdata)
{
	struct later **p = &laters;
	while (*p && (*p)->claim != c)
		p = &(*p)->next;
	if (*p) {
		struct later *l = *p;
		*p = l->next;
		dp_source_free(l->timer);
		free(l);
	}
	printf("cancel %s\n", dp_dra_claim_uid(c));
	fflush(stdout);
}

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	dp_loop_exit(loop, 0);
	return 0;
}

int main(int argc, char **argv)
{
	const dp_dra_driver drv = { .prepare = prepare, .unprepare = unprepare, .cancel = cancel };
	_cleanup_(dp_dra_freep) dp_dra *dra = NULL;
	dp_source *sigs[2] = { NULL, NULL };
	int r;

	if (argc != 2) {
		fprintf(stderr, "usage: dra_server SOCKET\n");
		return 2;
	}
	dp_log_init();
	if ((r = dp_loop_new(&loop)) < 0 || (r = dp_signal_add(loop, SIGTERM, on_signal, NULL, &sigs[0])) < 0 ||
	    (r = dp_signal_add(loop, SIGINT, on_signal, NULL, &sigs[1])) < 0 ||
	    (r = dp_dra_new(loop, argv[1], &drv, NULL, &dra)) < 0)
		goto out;
	r = dp_loop_run(loop);
out:
	dra = dp_dra_free(dra); /* cancels held claims (their lines printed) */
	while (laters) {
		struct later *l = laters;
		laters = l->next;
		dp_source_free(l->timer);
		free(l);
	}
	dp_source_free(sigs[0]);
	dp_source_free(sigs[1]);
	loop = dp_loop_free(loop);
	if (r < 0) {
		fprintf(stderr, "error %s\n", dp_errname(-r));
		return 1;
	}
	return 0;
}
