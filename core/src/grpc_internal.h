/* SPDX-License-Identifier: Apache-2.0 */
/* grpc_internal: pure helpers the gRPC server and client share (unit-tested through test_grpc). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* content-type is "application/grpc" optionally followed by "+..." or ";..." (case-insensitive). */
bool dp_grpc_content_type_ok(const uint8_t *v, size_t len);
/* grpc-status: 1 to 10 decimal digits, at most INT32_MAX. -EINVAL otherwise. */
int dp_grpc_parse_status(const uint8_t *v, size_t len, int *ret_status);
/* The gRPC status a client reports for a non-200 HTTP :status (grpc-go's table). */
int dp_grpc_status_from_http(int http_status);
/* The gRPC status for a RST_STREAM error code received before any status (PROTOCOL-HTTP2.md). */
int dp_grpc_status_from_rst(uint32_t error_code);
/* The HTTP/2 error code name ("CANCEL"), or "UNKNOWN". */
const char *dp_grpc_h2_error_name(uint32_t error_code);
