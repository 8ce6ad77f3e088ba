/* SPDX-License-Identifier: Apache-2.0 */
/*
 * label_node: what the hyperlight daemon (labels.c, the parent) and its node-label program
 * hyperlight-label-node (this folder, the child) must agree on: the helper entry's name, the
 * executable's name, the label keys and the child's timeouts. The daemon includes this header
 * only; the child side is label_patch.h.
 */
#pragma once

#define HL_LABEL_HELPER "label-node"
/* The helper executable (label-node/main.c), installed in the daemon's own directory. */
#define HL_LABEL_EXE "hyperlight-label-node"

#define HL_LABEL_PREFIX "hyperlight.dev/"
#define HL_LABEL_ENABLED "hyperlight.dev/enabled"
#define HL_LABEL_HYPERVISOR "hyperlight.dev/hypervisor"
/* The companions' labels "hyperlight.dev/<name>" an attempt may carry besides those two. */
#define HL_LABEL_COMPANIONS_MAX 3
#define HL_LABEL_CONNECT_TIMEOUT_MS 5000u
#define HL_LABEL_TRANSFER_TIMEOUT_MS 15000u
