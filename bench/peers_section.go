package main

import (
	"os"
	"strings"
)

// make bench rewrites docs/benchmarks.md whole; the sections of make bench-peers (bench/peers: the
// plugins people run, measured on the real cluster, and the VFIO behaviour table of
// bench/peers/kubevirt) are not its to measure, so they are carried over from the file as it was,
// between their markers (bench/peers/report and kubevirt/vfio-table.sh write them), before the
// section they sat before.
var keptSections = [][2]string{
	{"<!-- make bench-peers: begin", "<!-- make bench-peers: end -->"},
	{"<!-- vfio-table: begin", "<!-- vfio-table: end -->"},
}

const peersBefore = "## Targets missed in this run"

// keepPeersSection returns doc with the kept sections of the file at path, those it has.
func keepPeersSection(path string, doc []byte) []byte {
	old, err := os.ReadFile(path)
	if err != nil {
		return doc
	}
	s, d := string(old), string(doc)
	var kept strings.Builder
	for _, m := range keptSections {
		i := strings.Index(s, m[0])
		if i < 0 || strings.Contains(d, m[0]) {
			continue
		}
		j := strings.Index(s[i:], m[1])
		if j < 0 {
			continue
		}
		kept.WriteString(s[i:i+j+len(m[1])] + "\n\n")
	}
	if kept.Len() == 0 {
		return doc
	}
	if k := strings.Index(d, peersBefore); k >= 0 {
		return []byte(d[:k] + kept.String() + d[k:])
	}
	return []byte(d + "\n" + kept.String())
}
