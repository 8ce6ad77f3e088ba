// Command mock-kubelet serves the kubelet side of the device plugin API on <dir>/kubelet.sock
// and prints one logfmt line per event (registration, device snapshot, stream end...).
// SIGHUP simulates a kubelet restart, SIGUSR1 recreates kubelet.sock only; SIGINT/SIGTERM stop.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sdp/kubelet"
)

func main() {
	dir := flag.String("dir", "/var/lib/kubelet/device-plugins", "device plugin directory (kubelet.sock is served here)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "mock-kubelet: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	k, err := kubelet.Start(kubelet.Config{Dir: *dir, OnEvent: func(e kubelet.Event) { fmt.Println(e.String()) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1)
	for sig := range sigs {
		switch sig {
		case syscall.SIGHUP:
			if err := k.Restart(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		case syscall.SIGUSR1:
			if err := k.RecreateSocketOnly(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		default:
			k.Stop()
			return
		}
	}
}
