// SPDX-License-Identifier: Apache-2.0

// Package grpcpeer holds the conformance tests of libdp's gRPC layer against grpc-go (Debian's
// 1.33) and against hand-written HTTP/2 frames: the C test server
// ($SDP_BUILD_DIR/tests/grpc/grpc_test_server) is driven by grpc-go clients and raw frames,
// and its client mode calls grpc-go servers. Messages are raw bytes (rawCodec).
package grpcpeer

import (
	"encoding/binary"
	"fmt"
)

// rawCodec passes message bytes through: []byte or *[]byte.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	switch m := v.(type) {
	case []byte:
		return m, nil
	case *[]byte:
		return *m, nil
	}
	return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*p = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string   { return "proto" }
func (rawCodec) String() string { return "proto" }

// be32s encodes numbers as 32-bit big-endian, the test service's request format.
func be32s(vals ...uint32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// streamByte is byte j of message i of /test.Test/Stream.
func streamByte(i, j int) byte { return byte(i + j) }
