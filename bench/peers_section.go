package main

import (
	"os"
	"strings"
)

// make bench rewrites docs/benchmarks.md whole; the section of make bench-peers (bench/peers: the
// plugins people run, measured on the real cluster) is not its to measure, so it is carried over
// from the file as it was, between its markers (bench/peers/report writes them), before the
// section it sat before.
const (
	peersBegin  = "<!-- make bench-peers: begin"
	peersEnd    = "<!-- make bench-peers: end -->"
	peersBefore = "## Targets missed in this run"
)

// keepPeersSection returns doc with the bench-peers section of the file at path, if it has one.
func keepPeersSection(path string, doc []byte) []byte {
	old, err := os.ReadFile(path)
	if err != nil {
		return doc
	}
	s := string(old)
	i := strings.Index(s, peersBegin)
	if i < 0 {
		return doc
	}
	j := strings.Index(s[i:], peersEnd)
	if j < 0 {
		return doc
	}
	sec := s[i:i+j+len(peersEnd)] + "\n\n"
	d := string(doc)
	if strings.Contains(d, peersBegin) {
		return doc
	}
	if k := strings.Index(d, peersBefore); k >= 0 {
		return []byte(d[:k] + sec + d[k:])
	}
	return []byte(d + "\n" + sec)
}
