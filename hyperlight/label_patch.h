/* SPDX-License-Identifier: Apache-2.0 */
/*
 * label_patch: the child side of node labelling (labels.h is the parent side). One HTTPS
 * PATCH of this node's labels, sent from a short-lived helper child (dp/helper.h: the daemon's
 * own binary re-executed as  --dp-helper label-node ...), so that libcurl, OpenSSL and the
 * rest of libcurl's dependencies are never mapped into the long-lived daemon: the child loads
 * them with dlopen(HL_CURL_SONAME) and exits after one request.
 *
 *   label-node <url> <token path> <ca path> <hypervisor>
 *
 * The child reads the service account token (trailing whitespace trimmed), sends
 * PATCH <url> with the JSON merge patch
 *   {"metadata":{"labels":{"hyperlight.dev/enabled":"true","hyperlight.dev/hypervisor":"<hypervisor>"}}}
 * (TLS verified against <ca path> only; https only; connect 5 s, whole transfer 15 s) and
 * answers one line:
 *   ok status=200                       the API server accepted the patch (200 or 201)
 *   fail status=<code> body=<excerpt>   it answered anything else; <excerpt> is the start of
 *                                       the body, at most 200 bytes, every byte outside
 *                                       printable ASCII shown as '.'
 *   fail <reason>                       no answer, e.g.
 *     cannot read the service account token <path>: No such file or directory
 *     cannot read the service account token <path>: empty or not printable
 *     cannot load libcurl.so.4: libcurl.so.4: cannot open shared object file: No such file or directory
 *     libcurl.so.4 lacks curl_easy_init: <dlerror>
 *     Failed to connect to 10.96.0.1 port 443 after 3 ms: Couldn't connect to server   (libcurl's words)
 *     Operation timed out after 15000 milliseconds with 0 bytes received
 *     invalid label-node arguments: ...
 */
#pragma once

#include "dp/helper.h"

#define HL_LABEL_HELPER "label-node"
/* The one library the label child loads at run time. An image for the daemon must hold it
 * and its dependencies (scripts/image-context.sh: DLOPEN_LIBS). */
#define HL_CURL_SONAME "libcurl.so.4"

#define HL_LABEL_ENABLED "hyperlight.dev/enabled"
#define HL_LABEL_HYPERVISOR "hyperlight.dev/hypervisor"
#define HL_LABEL_CONNECT_TIMEOUT_MS 5000L
#define HL_LABEL_TRANSFER_TIMEOUT_MS 15000L
#define HL_LABEL_EXCERPT_MAX 200

extern const dp_helper_entry hl_label_helper;
