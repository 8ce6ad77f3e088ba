/* SPDX-License-Identifier: Apache-2.0 */
/* kubeenv: the node's name, the API server and the pod's service account, from the environment. */
#include "dp/kubeenv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/paths.h"

#define SA_TOKEN DP_KUBE_SA_DIR "/token"
#define SA_CA DP_KUBE_SA_DIR "/ca.crt"
#define DNS_LABEL_MAX 63

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

bool dp_kube_dns_subdomain(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	bool at_start = true;

	if (n == 0 || n > DP_KUBE_NODE_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '.') {
			if (at_start || s[i - 1] == '-')
				return false;
			at_start = true;
			continue;
		}
		if (c == '-' ? at_start : !is_lower_alnum(c))
			return false;
		at_start = false;
	}
	return !at_start && s[n - 1] != '-';
}

bool dp_kube_uid(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-')
			return false;
	return true;
}

bool dp_kube_dns_label(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n > 0 && n <= DNS_LABEL_MAX && !strchr(s, '.') && dp_kube_dns_subdomain(s);
}

/* A host name or IPv4 literal as it may appear in a URL: [A-Za-z0-9.-], <= 253 bytes. */
static bool url_host(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > DP_KUBE_NODE_MAX || s[0] == '-' || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '.')
			return false;
	return true;
}

static bool tcp_port(const char *s)
{
	unsigned long v = 0;

	if (!*s || strlen(s) > 5)
		return false;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	return v >= 1 && v <= 65535 && s[0] != '0';
}

static bool file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* https://HOST:PORT into e->api; 0, 1 or 2 as dp_kubeenv_load. */
static int api_base(dp_kubeenv *e, char *why, size_t size)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	const char *port = getenv("KUBERNETES_SERVICE_PORT");
	struct in6_addr a6;

	if (!host || !*host || !port || !*port) {
		snprintf(why, size, "%s is not set (not running in a cluster)",
			 !host || !*host ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT");
		return 1;
	}
	bool v6 = inet_pton(AF_INET6, host, &a6) == 1;
	if (!v6 && !url_host(host)) {
		snprintf(why, size, "KUBERNETES_SERVICE_HOST is not an IP address or host name");
		return 2;
	}
	if (!tcp_port(port)) {
		snprintf(why, size, "KUBERNETES_SERVICE_PORT is not a port number (1..65535)");
		return 2;
	}
	/* fits: an IPv6 literal is at most 45 bytes, a host name 253, a port 5 */
	snprintf(e->api, sizeof(e->api), "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
	return 0;
}

int dp_kubeenv_load(dp_kubeenv *ret, char *why, size_t why_size)
{
	const char *node = getenv("NODE_NAME");
	dp_kubeenv e;
	int r;

	if (!node || !*node) {
		snprintf(why, why_size, "NODE_NAME is not set");
		return 1;
	}
	if (!dp_kube_dns_subdomain(node)) {
		snprintf(why, why_size, "NODE_NAME is not a valid node name (DNS subdomain: lower-case "
					"letters, digits, '-' and '.', at most 253 bytes)");
		return 2;
	}
	if ((r = dp_path(e.token_path, sizeof(e.token_path), SA_TOKEN)) < 0 ||
	    (r = dp_path(e.ca_path, sizeof(e.ca_path), SA_CA)) < 0)
		return r;
	if (!file_exists(e.token_path) || !file_exists(e.ca_path)) {
		snprintf(why, why_size, "no service account mounted (%s missing)",
			 file_exists(e.token_path) ? SA_CA : SA_TOKEN);
		return 1;
	}
	snprintf(e.node, sizeof(e.node), "%s", node);
	if ((r = api_base(&e, why, why_size)) != 0)
		return r;
	*ret = e;
	return 0;
}
