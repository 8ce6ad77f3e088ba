package main

// DRA (PLUGIN_API=dra): hyperlight as the image ships it, as a DRA driver on a simulated node,
// with a fake API server over HTTPS (tests/kubelet FakeAPI behind the stub) and grpc-go in the
// kubelet's place (DRARegister, Prepare). Per round: start → registration socket, start →
// ResourceSlice published; NodePrepareResources of -dra-claims claims the first time (the
// helper fetches each over TLS, the claim is resolved and checkpointed) and again (answered
// from the checkpoint); and the time from the host's device node removed to the ResourceSlice
// updated with the taint, and from its return to the taint gone (the API server's view: the
// fake's store, polled every millisecond).

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	k "sdp/kubelet"
)

var (
	draOnly   = flag.Bool("dra-only", false, "run only the DRA figures (both daemons as DRA drivers), print them and rewrite their section of -out")
	draRounds = flag.Int("dra-rounds", 5, "DRA: rounds (a fresh node and daemon each)")
	draClaims = flag.Int("dra-claims", 20, "DRA: claims prepared per round")
)

const (
	draHeading = "## DRA (both daemons as DRA drivers)"
	draNext    = "## Idle"
	draPoll    = time.Millisecond
	draBound   = 30 * time.Second
)

type draRound struct {
	reg, slice     float64   // ms from start
	prepare, again []float64 // ms per call
	taint, untaint float64   // ms from the node's change to the slice's
	note           string
}

type draFigures struct {
	rounds, kata []draRound
	note, kataNote string
}

func draOneRound(hl daemonKind, claims int) (r draRound) {
	n, err := k.NewNode()
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer n.Remove()
	if err := n.MknodKVM(); err != nil {
		return draRound{note: err.Error()}
	}
	api := k.NewFakeAPI()
	stub, err := k.StartAPIStub(api.Answer)
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer stub.Close()
	if err := k.WriteServiceAccount(n.Root, "bench-token\n", stub.CAPEM); err != nil {
		return draRound{note: err.Error()}
	}
	env := append(append([]string{"LOG_LEVEL=info"}, hl.env...), "PLUGIN_API=dra", "DEVICE_COUNT=2000",
		"NODE_NAME=bench-node", "NODE_LABELS=false", "KUBERNETES_SERVICE_HOST="+stub.Host,
		"KUBERNETES_SERVICE_PORT="+stub.PortString(), "NO_PROXY=*", "no_proxy=*")
	start := time.Now()
	d, err := k.StartDaemon(hl.bin, k.DaemonEnv(n.Root, env...))
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer d.Stop(10 * time.Second)
	regSock := filepath.Join(n.Root, "var/lib/kubelet/plugins_registry", k.DRADriverHyperlight+"-reg.sock")
	if !k.PollEvery(draPoll, draBound, func() bool { _, err := os.Stat(regSock); return err == nil }) {
		return draRound{note: "no registration socket: " + d.Log()}
	}
	r.reg = ms(time.Since(start))
	if !k.PollEvery(draPoll, draBound, func() bool { return api.Device() != nil }) {
		return draRound{note: "no ResourceSlice: " + d.Log()}
	}
	r.slice = ms(time.Since(start))
	c, err := k.DRARegister(n.Root, k.DRADriverHyperlight, draBound)
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer c.Close()
	for i := 0; i < claims; i++ {
		uid := fmt.Sprintf("bench-%04d-0000-4000-8000-000000000000", i)
		name := fmt.Sprintf("c%d", i)
		api.SetClaim("bench", name, uid, "bench-node", true)
		t := time.Now()
		p, err := c.Prepare("bench", name, uid)
		if err != nil || p.Error != "" {
			return draRound{note: fmt.Sprintf("prepare %s: %v %+v", name, err, p)}
		}
		r.prepare = append(r.prepare, ms(time.Since(t)))
		t = time.Now()
		if p, err = c.Prepare("bench", name, uid); err != nil || p.Error != "" {
			return draRound{note: fmt.Sprintf("prepare %s again: %v %+v", name, err, p)}
		}
		r.again = append(r.again, ms(time.Since(t)))
	}
	tainted := func() bool { dv := api.Device(); return dv != nil && dv["taints"] != nil }
	t := time.Now()
	if err := os.Remove(n.KVMPath()); err != nil {
		return draRound{note: err.Error()}
	}
	if !k.PollEvery(draPoll, draBound, tainted) {
		return draRound{note: "no taint after the node was removed: " + d.Log()}
	}
	r.taint = ms(time.Since(t))
	t = time.Now()
	if err := n.MknodKVM(); err != nil {
		return draRound{note: err.Error()}
	}
	if !k.PollEvery(draPoll, draBound, func() bool { return api.Device() != nil && !tainted() }) {
		return draRound{note: "the taint stayed after the node came back: " + d.Log()}
	}
	r.untaint = ms(time.Since(t))
	return r
}

// measureDRA: the rounds of hyperlight and of kata, alternating (the order rotated each round).
func measureDRA(hl, kata daemonKind, rounds, claims int) draFigures {
	var f draFigures
	for i := 0; i < rounds; i++ {
		one := func(isKata bool) {
			if isKata && f.kataNote == "" {
				if r := draKataOneRound(kata, claims); r.note != "" {
					f.kataNote = fmt.Sprintf("round %d: %s", i+1, r.note)
				} else {
					f.kata = append(f.kata, r)
				}
			} else if !isKata && f.note == "" {
				if r := draOneRound(hl, claims); r.note != "" {
					f.note = fmt.Sprintf("round %d: %s", i+1, r.note)
				} else {
					f.rounds = append(f.rounds, r)
				}
			}
		}
		one(i%2 == 1)
		one(i%2 == 0)
		fmt.Fprintf(os.Stderr, "DRA round %d of %d done\n", i+1, rounds)
	}
	return f
}

// draTable: one driver's figures as a table (or why they are missing).
func draTable(d *doc, rounds []draRound, note string, change, back string) {
	if note != "" {
		d.p("Not measured: %s.", note)
		d.p("")
		return
	}
	var reg, slice, prep, again, taint, untaint []float64
	for _, r := range rounds {
		reg, slice = append(reg, r.reg), append(slice, r.slice)
		prep, again = append(prep, r.prepare...), append(again, r.again...)
		taint, untaint = append(taint, r.taint), append(untaint, r.untaint)
	}
	d.p("| figure | median (min–max) | p99 | n |")
	d.p("|---|---|---|---|")
	row := func(name string, v []float64) {
		s := summarize(v)
		d.p("| %s | %s | %s | %d |", name, rng(s), f1(s.p99), s.n)
	}
	row("start → registration socket (ms)", reg)
	row("start → ResourceSlice published (ms)", slice)
	row("NodePrepareResources, first (ms): fetch, resolve, checkpoint", prep)
	row("NodePrepareResources, again (ms): from the checkpoint", again)
	row(change+" → slice tainted (ms)", taint)
	row(back+" → taint gone (ms)", untaint)
	d.p("")
}

func writeDRA(d *doc, f draFigures, rerun string) {
	d.p("%s", draHeading)
	d.p("")
	d.p("Each daemon as its image ships it, with PLUGIN_API=dra, on a simulated node: a fake API server over HTTPS on")
	d.p("127.0.0.1 (tests/kubelet/drakubelet.go: slices and claims kept as the API server keeps them) and grpc-go in the")
	d.p("kubelet's place. Every API call is one run of the helper program (a child: exec, TLS handshake, one request).")
	d.p("%d rounds each, hyperlight and kata alternating, a fresh node and daemon each; %d claims prepared per round.", *draRounds, *draClaims)
	d.p("Re-run: %s.", rerun)
	d.p("")
	d.p("hyperlight (one shared device, capacity 2000 sandboxes; the host's /dev/kvm removed and made again):")
	d.p("")
	draTable(d, f.rounds, f.note, "host node removed", "host node back")
	d.p("kata (a legacy node of four GPUs, each with its audio companion, and an NVSwitch; one-GPU claims; the")
	d.p("companion's driver link pointed at snd_hda_intel, then one PCI uevent from the kernel, as a bind sends):")
	d.p("")
	draTable(d, f.kata, f.kataNote, "companion bound to its host driver", "companion back on vfio-pci")
}

func draOnlyMode(src string, hl, kata daemonKind) {
	if _, note := staticKata(src); note != "" { // builds the shipped hyperlight too
		fatal("scripts/build-static.sh: %s", note)
	}
	f := measureDRA(hl, kata, *draRounds, *draClaims)
	var d doc
	writeDRA(&d, f, "`make bench-dra`")
	fmt.Print(d.b.String())
	if f.note != "" || f.kataNote != "" {
		fatal("%s %s", f.note, f.kataNote)
	}
	rewriteSection(*outPath, draHeading, draNext, d.b.Bytes())
}
