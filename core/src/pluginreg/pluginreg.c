/* SPDX-License-Identifier: Apache-2.0 */
/* pluginreg: the kubelet's plugin registration socket (pluginregistration v1). */
#include "dp/pluginreg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "pluginregistration.pb-c.h"
#include "requests/pbwire.h"

/* The kubelet's error message is kept up to this many bytes (it is told, and logged, whole
 * up to here). */
#define ERROR_MAX 4096

struct dp_pluginreg {
	dp_grpc_server *server;
	char path[DP_SOCKET_SUN_PATH];
	dev_t dev;
	ino_t ino;
	char *type, *name, *endpoint;
	char *versions[DP_PLUGINREG_VERSIONS_MAX];
	size_t n_versions;
	dp_pluginreg_status_fn on_status;
	void *userdata;
	int status; /* -1 none yet, 0 refused, 1 registered */
	char error[ERROR_MAX + 1];
};

static bool name_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > DP_PLUGINREG_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		bool inner = (c == '-' || c == '.') && i > 0 && i < n - 1;
		if (!alnum && !inner)
			return false;
	}
	return true;
}

static bool config_valid(const dp_pluginreg_config *c)
{
	if (!c->type || !c->type[0] || !c->name || !name_valid(c->name) || !c->endpoint ||
	    c->endpoint[0] != '/' || !c->versions || c->n_versions == 0 ||
	    c->n_versions > DP_PLUGINREG_VERSIONS_MAX)
		return false;
	for (size_t i = 0; i < c->n_versions; i++)
		if (!c->versions[i] || !c->versions[i][0])
			return false;
	return true;
}

static void rpc_get_info(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_pluginreg *r = userdata;
	Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
	dp_pbreader rd;
	dp_pbfield f;
	int k;

	dp_pb_reader_init(&rd, msg, len);
	while ((k = dp_pb_next(&rd, &f)) > 0)
		; /* InfoRequest has no field: any is skipped */
	if (k < 0) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "cannot decode InfoRequest");
		return;
	}
	info.type = r->type;
	info.name = r->name;
	info.endpoint = r->endpoint;
	info.n_supported_versions = r->n_versions;
	info.supported_versions = r->versions;
	(void)dp_grpc_call_send_pb(call, &info.base);
}

/* RegistrationStatus (field 1 plugin_registered, field 2 error; the last of each wins) into
 * *registered and error (ERROR_MAX + 1 bytes). NULL, or why it is refused. */
static const char *decode_status(const uint8_t *msg, size_t len, bool *registered, char *error)
{
	dp_pbreader rd;
	dp_pbfield f;
	int k;

	*registered = false;
	error[0] = '\0';
	dp_pb_reader_init(&rd, msg, len);
	while ((k = dp_pb_next(&rd, &f)) > 0) {
		if (f.number == 1) {
			if (f.wire != DP_PB_VARINT)
				return "cannot decode RegistrationStatus";
			*registered = f.varint != 0;
		} else if (f.number == 2) {
			if (f.wire != DP_PB_LEN)
				return "cannot decode RegistrationStatus";
			if (memchr(f.data, '\0', f.len))
				return "error holds a NUL byte";
			size_t n = f.len > ERROR_MAX ? ERROR_MAX : f.len;
			memcpy(error, f.data, n);
			error[n] = '\0';
		}
	}
	return k < 0 ? "cannot decode RegistrationStatus" : NULL;
}

static void rpc_notify(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_pluginreg *r = userdata;
	Pluginregistration__RegistrationStatusResponse resp = PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
	char error[ERROR_MAX + 1];
	bool registered;
	const char *why = decode_status(msg, len, &registered, error);

	if (why) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, why);
		return;
	}
	r->status = registered;
	memcpy(r->error, error, sizeof(r->error));
	(void)dp_grpc_call_send_pb(call, &resp.base);
	if (r->on_status)
		r->on_status(registered, r->error, r->userdata);
}

static int copy_config(dp_pluginreg *r, const dp_pluginreg_config *c)
{
	r->type = strdup(c->type);
	r->name = strdup(c->name);
	r->endpoint = strdup(c->endpoint);
	if (!r->type || !r->name || !r->endpoint)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_versions; i++) {
		r->versions[i] = strdup(c->versions[i]);
		if (!r->versions[i])
			return -ENOMEM;
		r->n_versions++;
	}
	r->on_status = c->on_status;
	r->userdata = c->userdata;
	r->status = -1;
	return 0;
}

/* Serve the socket; a stale one of that name (nobody listens) is replaced once. */
static int serve(dp_pluginreg *r, dp_loop *loop)
{
	const dp_grpc_method methods[] = {
		{ DP_PLUGINREG_GETINFO_PATH, DP_GRPC_METHOD_UNARY, rpc_get_info, r },
		{ DP_PLUGINREG_NOTIFY_PATH, DP_GRPC_METHOD_UNARY, rpc_notify, r },
	};
	struct stat st;
	int n = 2;
	int ret = dp_grpc_server_new(loop, r->path, methods, n, NULL, &r->server);

	if (ret == -EADDRINUSE && dp_socket_stale(r->path) == 1) {
		dp_debug("removed stale socket", "socket=\"%s\"", r->path);
		if (unlink(r->path) < 0 && errno != ENOENT)
			return -errno;
		ret = dp_grpc_server_new(loop, r->path, methods, n, NULL, &r->server);
	}
	if (ret < 0)
		return ret;
	if (lstat(r->path, &st) == 0) {
		r->dev = st.st_dev;
		r->ino = st.st_ino;
	}
	return 0;
}

int dp_pluginreg_new(dp_loop *loop, const char *dir, const dp_pluginreg_config *c, dp_pluginreg **ret)
{
	if (!loop || !dir || !c || !config_valid(c))
		return -EINVAL;
	_cleanup_(dp_pluginreg_freep) dp_pluginreg *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	if ((size_t)snprintf(r->path, sizeof(r->path), "%s/%s%s", dir, c->name, DP_PLUGINREG_SUFFIX) >=
	    sizeof(r->path)) {
		r->path[0] = '\0';
		// cppcheck-suppress memleak ; r is freed by its _cleanup_ attribute, which cppcheck does not model
		return -ENAMETOOLONG;
	}
	int e = copy_config(r, c);
	if (e >= 0)
		e = serve(r, loop);
	if (e < 0) {
		r->path[0] = '\0'; /* nothing of ours to remove */
		return e;
	}
	*ret = TAKE_PTR(r);
	return 0;
}

dp_pluginreg *dp_pluginreg_free(dp_pluginreg *r)
{
	struct stat st;

	if (!r)
		return NULL;
	r->server = dp_grpc_server_free(r->server);
	/* only the socket created: same inode, still a socket */
	if (r->path[0] && r->ino && lstat(r->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == r->ino &&
	    st.st_dev == r->dev)
		(void)unlink(r->path);
	free(r->type);
	free(r->name);
	free(r->endpoint);
	for (size_t i = 0; i < r->n_versions; i++)
		free(r->versions[i]);
	free(r);
	return NULL;
}

const char *dp_pluginreg_socket(const dp_pluginreg *r) { return r->path; }

int dp_pluginreg_status(const dp_pluginreg *r, const char **error)
{
	if (error)
		*error = r->error;
	return r->status;
}
