package main

import (
	"flag"
	"fmt"
	"os"
)

var restartsLog = flag.String("restarts-log", "", "with -restarts-only: run the daemon with LOG_LEVEL=debug and write its log to this file")

var restartsOnly = flag.String("restarts-only", "", "run only the kubelet restarts (-restarts of them) of this kind (kata, hyperlight, reference; hyperlight is the dynamic build here) after one start-up, and print p50/p99/max")

// restartsOnlyMode prints "restarts n=N p50_ms=A p99_ms=B max_ms=C" and, to stderr, every
// restart slower than 5 ms with its index.
func restartsOnlyMode(all []daemonKind, build string) {
	for _, kd := range all {
		if kd.name != *restartsOnly || kd.name == "kata-static" {
			continue
		}
		if kd.name == "hyperlight" { // the dynamic build with DaemonEnv's glibc shim
			kd.bin = build + "/hyperlight-device-plugin"
			kd.env = []string{"DEVICE_COUNT=2000"}
		}
		if *restartsLog != "" {
			kd.env = append(kd.env, "LOG_LEVEL=debug")
		}
		_, nd := runStartup(kd, true)
		v := measureRestarts(nd, *restarts)
		if *restartsLog != "" {
			if err := os.WriteFile(*restartsLog, []byte(nd.d.Log()), 0o644); err != nil {
				fatal("%v", err)
			}
		}
		nd.close()
		for i, x := range v {
			if x > 5 {
				fmt.Fprintf(os.Stderr, "restart %d: %.3f ms\n", i, x)
			}
		}
		s := summarize(v)
		fmt.Printf("restarts %s n=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n", kd.name, s.n, s.med, s.p99, s.max)
		return
	}
	fatal("-restarts-only: unknown kind %q", *restartsOnly)
}
