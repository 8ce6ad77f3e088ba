/* SPDX-License-Identifier: Apache-2.0 */
/*
 * label_patch: the child side of node labelling (labels.h is the parent side). One HTTPS
 * PATCH of this node's labels, sent from a short-lived helper child (dp/helper.h): the program
 * hyperlight-label-node (main.c) beside the daemon, run as  --dp-helper label-node ...,
 * so that the HTTP and TLS code (https.h, Mbed TLS) is never even mapped into the daemon.
 *
 *   label-node <url> <token path> <ca path> <hypervisor> <enabled> [hyperlight.dev/<name>=<value>...]
 *
 * The child reads the service account token (trailing whitespace trimmed), sends
 * PATCH <url> with the JSON merge patch
 *   {"metadata":{"labels":{"hyperlight.dev/enabled":"<enabled>","hyperlight.dev/hypervisor":"<hypervisor>"
 *                          [,"hyperlight.dev/<name>":"<value>"...]}}}
 * (<enabled> and each <value> are "true" or "false", the parent's verdicts after their hold,
 * labels.h; at most HL_LABEL_COMPANIONS_MAX companion labels, each <name> a label name part,
 * neither "enabled" nor "hypervisor", none twice)
 * (TLS 1.2, verified against <ca path> only, the host's name or address checked; https only;
 * each address's connect 5 s, the whole exchange 15 s) and answers one line:
 *   ok status=200                       the API server accepted the patch (200 or 201)
 *   fail status=<code> body=<excerpt>   it answered anything else; <excerpt> is the start of
 *                                       the body, at most 200 bytes, every byte outside
 *                                       printable ASCII shown as '.'
 *   fail <reason>                       no answer (https.h lists them), e.g.
 *     cannot read the service account token <path>: No such file or directory
 *     cannot read the service account token <path>: empty or not printable
 *     cannot read the CA certificates <path>: No such file or directory
 *     cannot connect to 10.96.0.1 port 443: Connection refused
 *     TLS handshake with 10.96.0.1 port 443: certificate rejected: The certificate is not correctly signed by the trusted CA
 *     waiting for the answer from 10.96.0.1 port 443: timed out
 *     scheme http not supported: https only
 *     invalid label-node arguments: ...
 */
#pragma once

#include "dp/helper.h"
#include "dp/http_response.h"
#include "label_node.h"

extern const dp_helper_entry hl_label_helper;
