// sdp-peers-report writes the section "Against the plugins people run" of docs/benchmarks.md
// from the raw figures of bench/peers/run.sh (results.tsv: "ROUND\tPLUGIN\tMETRIC\tVALUE" lines
// and "meta\tKEY\tVALUE" lines). The section sits between two marker comments; the file's other
// sections are left as they are (make bench keeps this one: bench/peers_section.go).
//
//	sdp-peers-report -results FILE -out docs/benchmarks.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

const (
	begin = "<!-- make bench-peers: begin (bench/peers; never edited by hand) -->"
	end   = "<!-- make bench-peers: end -->"
	// the section goes before this heading when the file has no markers yet
	before = "## Targets missed in this run"
)

var plugins = []string{"hyperlight", "generic", "smarter"}
var peers = []string{"generic", "smarter"}

type results struct {
	meta  map[string][]string
	vals  map[string]map[string]map[int][]string // metric → plugin → round → values
	round []int
}

func read(path string) results {
	f, err := os.Open(path)
	if err != nil {
		fatal("%v", err)
	}
	defer f.Close()
	r := results{meta: map[string][]string{}, vals: map[string]map[string]map[int][]string{}}
	seen := map[int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.SplitN(sc.Text(), "\t", 4)
		if len(c) == 3 && c[0] == "meta" {
			r.meta[c[1]] = append(r.meta[c[1]], c[2])
			continue
		}
		if len(c) != 4 {
			continue
		}
		n, err := strconv.Atoi(c[0])
		if err != nil {
			continue
		}
		if r.vals[c[2]] == nil {
			r.vals[c[2]] = map[string]map[int][]string{}
		}
		if r.vals[c[2]][c[1]] == nil {
			r.vals[c[2]][c[1]] = map[int][]string{}
		}
		r.vals[c[2]][c[1]][n] = append(r.vals[c[2]][c[1]][n], c[3])
		if !seen[n] {
			seen[n] = true
			r.round = append(r.round, n)
		}
	}
	sort.Ints(r.round)
	return r
}

func (r results) m(key string) string {
	if v := r.meta[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// nums: every numeric value of metric for plugin (all rounds), and the rounds' own medians.
func (r results) nums(metric, plugin string) (all []float64, perRound map[int]float64) {
	perRound = map[int]float64{}
	for rd, vs := range r.vals[metric][plugin] {
		var x []float64
		for _, v := range vs {
			if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) {
				x = append(x, f)
			}
		}
		if len(x) > 0 {
			all = append(all, x...)
			perRound[rd] = median(x)
		}
	}
	return
}

func (r results) strs(metric, plugin string) (n int, counts map[string]int) {
	counts = map[string]int{}
	for _, vs := range r.vals[metric][plugin] {
		for _, v := range vs {
			n++
			counts[v]++
		}
	}
	return
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minmax(x []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range x {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return lo, hi
}

// g: three significant digits, no exponent below a million.
func g(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// cell: "median (min–max)" of every value, and how many.
func cell(x []float64) string {
	if len(x) == 0 {
		return "—"
	}
	if len(x) == 1 {
		return g(x[0])
	}
	lo, hi := minmax(x)
	return fmt.Sprintf("%s (%s–%s)", g(median(x)), g(lo), g(hi))
}

func ratio(x []float64) string {
	if len(x) == 0 {
		return "—"
	}
	lo, hi := minmax(x)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	if len(x) == 1 {
		return f(x[0])
	}
	return fmt.Sprintf("%s (%s–%s)", f(median(x)), f(lo), f(hi))
}

// ratios: ours / peer within each round, of the rounds' medians.
func (r results) ratios(metric, peer string) []float64 {
	_, ours := r.nums(metric, "hyperlight")
	_, theirs := r.nums(metric, peer)
	var x []float64
	for _, rd := range r.round {
		a, okA := ours[rd]
		b, okB := theirs[rd]
		if okA && okB && b != 0 {
			x = append(x, a/b)
		}
	}
	return x
}

type doc struct{ b strings.Builder }

func (d *doc) p(format string, a ...any) { fmt.Fprintf(&d.b, format+"\n", a...) }

func main() {
	resPath := flag.String("results", "", "results.tsv of bench/peers/run.sh")
	outPath := flag.String("out", "", "the document whose section is rewritten (printed when empty)")
	command := flag.String("command", "make bench-peers", "the command named in the section")
	flag.Parse()
	if *resPath == "" {
		fatal("-results is required")
	}
	r := read(*resPath)
	var d doc
	write(&d, r, *command)
	if *outPath == "" {
		fmt.Print(d.b.String())
		return
	}
	old, err := os.ReadFile(*outPath)
	if err != nil {
		fatal("%v", err)
	}
	if err := os.WriteFile(*outPath, []byte(replace(string(old), d.b.String())), 0o644); err != nil {
		fatal("%v", err)
	}
}

// replace puts sec between the markers of doc (markers included in sec), or before the heading
// `before`, or at the end.
func replace(doc, sec string) string {
	sec = begin + "\n" + sec + end + "\n"
	if i := strings.Index(doc, begin); i >= 0 {
		if j := strings.Index(doc[i:], end); j >= 0 {
			k := i + j + len(end)
			if k < len(doc) && doc[k] == '\n' {
				k++
			}
			return doc[:i] + sec + doc[k:]
		}
	}
	if i := strings.Index(doc, before); i >= 0 {
		return doc[:i] + sec + "\n" + doc[i:]
	}
	return doc + "\n" + sec
}

func write(d *doc, r results, command string) {
	count, idle, burst := r.m("count"), r.m("idle"), r.m("burst")
	d.p("## Against the plugins people run")
	d.p("")
	d.p("Generated by `%s` (bench/peers: `build.sh` builds the peers, `run.sh` measures, `report/` writes this",
		command)
	d.p("section); never edited by hand. Our hyperlight and the device plugins people deploy for `/dev/kvm` instead,")
	d.p("each built from its Go module at a pinned version through the Go module proxy (nothing of theirs is in this")
	d.p("repository but the go.mod and go.sum that pin them), each deployed on the real single-node cluster of")
	d.p("`make cluster` (Kubernetes %s, containerd, runc; cluster/README.md) beside nothing else for its resource: the",
		r.m("kubernetes"))
	d.p("kubelet takes one plugin per resource name, so they run one at a time, each advertising the node's")
	d.p("`/dev/kvm` %s times. %s rounds, each round every plugin once in a rotated order (Host, below); a ratio",
		count, r.m("rounds"))
	d.p("column is the median (min–max) of the per-round ratios ours/peer (taken within a round, where both met the")
	d.p("same neighbours on this shared machine), a figure \"median (min–max)\" over the rounds' values.")
	d.p("")
	hv := "the host's `/dev/kvm`"
	if r.m("hv") == "standin" {
		hv = "a stand-in `/dev/kvm` (this host has none): `c 10:232`, `root:root 0660`, no driver behind it, as `make test-cluster` makes it; hyperlight's probe runs on the tests' hypervisor stand-in (tests/cluster/test-renderer.py hvshim), the peers only look for the node, which is all they do on a real one"
	}
	d.p("The device: %s.", hv)
	d.p("")
	d.p("| plugin | built from | deployed as | resource |")
	d.p("|---|---|---|---|")
	d.p("| **hyperlight** (ours) | this repository, the shipped image (`%s`) | its Helm chart (deploy/helm/hyperlight-device-plugin: the bootstrap `hyperlight-device-access` DaemonSet and the main plugin's), `deviceCount=%s` | `hyperlight.dev/hypervisor` |",
		strings.TrimPrefix(r.m("hyperlight_image"), ""), count)
	d.p("| **generic** | `github.com/squat/generic-device-plugin` %s (bench/peers/go.mod: its own requirements, grpc v1.81.0, k8s.io/kubelet v0.36.0) | its manifest's DaemonSet (manifests/generic-device-plugin.yaml: privileged, the host's `/dev`, its resources 50m/20Mi), `--domain hyperlight.dev --device '{\"name\": \"hypervisor\", \"groups\": [{\"count\": %s, \"paths\": [{\"path\": \"/dev/kvm\"}]}]}'` | `hyperlight.dev/hypervisor` (ours: its `--domain`) |",
		strings.TrimPrefix(r.m("generic_image"), "localhost/generic-device-plugin:"), count)
	d.p("| **smarter** | `gitlab.com/arm-research/smarter/smarter-device-manager` %s (bench/peers/smarter/go.mod: its release's go.mod is empty and its Dockerfile resolves the latest modules at build time; pinned to those of its release, 2022-09: k8s.io/kubelet v0.25.0, grpc v1.49.0; today's k8s.io/kubelet no longer compiles it) | its manifest's DaemonSet (smarter-device-manager-ds-with-configmap-*.yaml: host network, no capability, the host's `/dev` and `/sys`, its resources 100m/15Mi), its configuration `- devicematch: ^kvm$` `nummaxdevices: %s` | `smarter-devices/kvm` (its own: it names resources after the device) |",
		strings.TrimPrefix(r.m("smarter_image"), "localhost/smarter-device-manager:"), count)
	d.p("")
	d.p("Both peers are built static (`CGO_ENABLED=0`) and stripped (`-s -w`), as their images ship them, into")
	d.p("one-layer OCI images (cluster/oci-image.py) imported into containerd, as `make cluster` makes its images.")
	d.p("")

	// the table
	type row struct {
		name, metric string
		note         string
	}
	rows := []row{
		{"deployed → allocatable at the kubelet (pod-resources API) (s)", "start_kubelet_s", ""},
		{"deployed → allocatable in the API server's Node (s)", "start_alloc_s", ""},
		{"idle CPU, the daemons' own (ms per minute)", "idle_daemon_cpu_ms_per_min", ""},
		{"idle CPU, the plugin's containers' cgroups: the kubelet's exec probes included (ms per minute)", "idle_cpu_ms_per_min", ""},
		{"idle RSS, every container of the plugin (KiB)", "idle_rss_kib", ""},
		{"idle RSS, the daemon serving the resource (KiB)", "idle_rss_main_kib", ""},
		{"one pod with one device: created → Running (s)", "pod_start_s", ""},
		{fmt.Sprintf("burst: %s pods, one device each, created at once → all Running (s)", burst), "burst_s", ""},
		{"the daemons' own CPU over the burst (ms)", "burst_daemon_cpu_ms", ""},
		{"the containers' CPU over the burst (ms)", "burst_cpu_ms", ""},
		{"plugin RSS, peak during the burst (KiB)", "burst_rss_kib", ""},
		{"Allocate as the kubelet times it, mean (ms)", "alloc_mean_ms", ""},
		{"kubelet restart → allocatable again at the new kubelet (s)", "kubelet_restart_kubelet_s", ""},
		{"kubelet restart → allocatable again, in a status of the new kubelet (s)", "kubelet_restart_s", ""},
		{"host `/dev/kvm` removed → allocatable drops at the kubelet (s)", "dev_drop_kubelet_s", ""},
		{"host `/dev/kvm` removed → allocatable drops in the Node (s)", "dev_drop_s", ""},
		{"host `/dev/kvm` made again → allocatable back at the kubelet (s)", "dev_back_kubelet_s", ""},
		{"host `/dev/kvm` made again → allocatable back in the Node (s)", "dev_back_s", ""},
	}
	d.p("| figure | hyperlight | generic | smarter | hyperlight/generic | hyperlight/smarter |")
	d.p("|---|---|---|---|---|---|")
	for _, rw := range rows {
		cells := []string{rw.name}
		for _, p := range plugins {
			all, _ := r.nums(rw.metric, p)
			n, counts := r.strs(rw.metric, p)
			c := cell(all)
			if never := counts["never"]; never > 0 {
				if len(all) == 0 {
					c = fmt.Sprintf("never (%d of %d rounds)", never, n)
				} else {
					c += fmt.Sprintf("; never in %d of %d", never, n)
				}
			}
			cells = append(cells, c)
		}
		for _, p := range peers {
			cells = append(cells, ratio(r.ratios(rw.metric, p)))
		}
		d.p("| %s |", strings.Join(cells, " | "))
	}
	// image sizes (once)
	imgs := map[string]string{}
	for _, v := range r.meta["image_size"] {
		f := strings.Fields(v)
		if len(f) == 2 {
			imgs[f[0]] = f[1]
		}
	}
	bins := map[string]float64{}
	for _, v := range r.meta["binary_kib"] {
		f := strings.Fields(v)
		if len(f) == 2 {
			bins[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	refs := map[string]string{"hyperlight": r.m("hyperlight_image"), "generic": r.m("generic_image"), "smarter": r.m("smarter_image")}
	cells := []string{"image in containerd (`ctr images ls` size)"}
	for _, p := range plugins {
		cells = append(cells, orDash(imgs[refs[p]]))
	}
	cells = append(cells, "", "")
	d.p("| %s |", strings.Join(cells, " | "))
	cells = []string{"the daemon's binary (KiB; hyperlight: musl's libc.so beside it in the image)"}
	for _, p := range plugins {
		cells = append(cells, g(bins[p]))
	}
	for _, p := range peers {
		cells = append(cells, strconv.FormatFloat(bins["hyperlight"]/bins[p], 'f', 2, 64))
	}
	d.p("| %s |", strings.Join(cells, " | "))
	d.p("")
	an := func(p string) string {
		all, _ := r.nums("alloc_n", p)
		var t float64
		for _, v := range all {
			t += v
		}
		return strconv.FormatFloat(t, 'f', 0, 64)
	}
	d.p("How: deployed is `helm upgrade --install` (hyperlight) or `kubectl apply` (the peers) to allocatable %s,",
		count)
	d.p("polled (about every 0.5 s, each poll a client process) in two places: the kubelet's own view, its")
	d.p("pod-resources API's GetAllocatableResources (healthy devices; `sdp-kube podresources`, cluster/kube), and")
	d.p("the API server's Node, which adds the kubelet's node-status update (alike for every plugin; hyperlight's")
	d.p("chart waits for two: its bootstrap plugin's resource, then the main plugin scheduled on it).")
	d.p("After 10 s, the idle window: %s s. The daemons' own CPU: every thread's schedstat, plus the children",
		idle)
	d.p("they reaped (hyperlight's probe helper); the containers' CPU: their cgroups' cpuacct.usage, every process")
	d.p("in them, so the kubelet's exec probes too (hyperlight's chart has a liveness and a readiness exec probe")
	d.p("every 10 s in each of its two pods; the peers' manifests have none); per minute.")
	d.p("RSS is VmRSS of the containers' processes at its end. Pods: busybox `sleep`, uid 65534, one device each;")
	d.p("created → Running by the API server's pod phase (three single pods a round, then the burst), deleted after.")
	d.p("Peak RSS: sampled every 0.1 s through the burst. Allocate: the kubelet's own histogram")
	d.p("`kubelet_device_plugin_alloc_duration_seconds` for the resource (its /metrics through the API server's")
	d.p("node proxy), sum over count of the round's Allocates (%s, %s and %s in all): the kubelet's gRPC client,",
		an("hyperlight"), an("generic"), an("smarter"))
	d.p("the call and the answer. Kubelet restart: cluster/lib.sh `restart_component kubelet` (SIGTERM, the same")
	d.p("command line again) to allocatable back in a status whose Ready heartbeat is after the restart. Device")
	d.p("removed: `rm /dev/kvm` on the host, allocatable polled for %s s; then the node made again as it was.", "30")
	d.p("")
	// host
	d.p("Host during the run (%s CPUs; load average before: %s; whole run %s s):", r.m("nproc"), r.m("load_before"), trimS(r.m("duration")))
	d.p("")
	d.p("| round | order | duration (s) | load avg, 1 min |")
	d.p("|---|---|---|---|")
	for _, v := range r.meta["round"] {
		f := strings.Split(v, "|")
		if len(f) == 4 {
			d.p("| %s | %s | %s | %s |", f[0], strings.ReplaceAll(f[1], " ", ", "), trimS(f[2]), f[3])
		}
	}
	d.p("")
	// findings
	d.p("What each does (measured above, and read in their sources at the pinned versions):")
	d.p("")
	drop := func(p string) string {
		all, _ := r.nums("dev_drop_kubelet_s", p)
		n, counts := r.strs("dev_drop_kubelet_s", p)
		if counts["never"] == n && n > 0 {
			_, gone := r.strs("dev_gone_pod", p)
			var what []string
			for k, v := range gone {
				what = append(what, fmt.Sprintf("%s in %d", k, v))
			}
			sort.Strings(what)
			return fmt.Sprintf("never dropped it (%d of %d rounds, %s s each); a pod asking for it meanwhile: %s", counts["never"], n, "30", strings.Join(what, ", "))
		}
		if counts["never"] > 0 {
			return fmt.Sprintf("dropped it at the kubelet in %s s (median of %d rounds) and not within %s s in %d of %d rounds", g(median(all)), len(all), "30", counts["never"], n)
		}
		return fmt.Sprintf("dropped it at the kubelet in %s s (median of %d rounds)", g(median(all)), len(all))
	}
	d.p("- **Device removed.** hyperlight %s: it watches the host's node (inotify) and marks every device", drop("hyperlight"))
	d.p("  Unhealthy. generic %s: it globs its paths every 5 s (deviceplugin/generic.go,", drop("generic"))
	d.p("  `deviceCheckInterval`) and sends the list without them (never Unhealthy: `GetDeviceState` always says")
	d.p("  Healthy).")
	_, c1 := r.strs("dev_drop_kubelet_s", "generic")
	nb, c2 := r.strs("dev_back_kubelet_s", "generic")
	if c1["never"]+c2["never"] > 0 {
		d.p("  The node made again: generic advertised it again at the kubelet within 120 s in %d of %d rounds.", nb-c2["never"], nb)
		d.p("  Why not always, read in its source: each ListAndWatch stream is a loop that refreshes the one device")
		d.p("  map every 5 s and sends only on a change; a kubelet restart ends the stream, but the loop notices only")
		d.p("  when it next sends, so after a restart two loops share the map: when the old one takes the change, its")
		d.p("  send fails and it exits, and the new one finds nothing changed and sends nothing (each removal here came")
		d.p("  10 s after a kubelet restart); the kubelet then holds the old list until the next change.")
	}
	d.p("  smarter %s: it lists `/dev` once at start (main.go) and its", drop("smarter"))
	d.p("  ListAndWatch only ever reports what its health channel is fed, which nothing feeds for a device file;")
	d.p("  the kubelet keeps scheduling pods onto a device that is gone.")
	dev := func(p string) string {
		_, c := r.strs("pod_dev", p)
		var x []string
		for k, v := range c {
			x = append(x, fmt.Sprintf("`%s` (%d)", strings.ReplaceAll(k, "_", " "), v))
		}
		sort.Strings(x)
		return strings.Join(x, ", ")
	}
	d.p("- **Allocate's answer.** hyperlight answers with a CDI device (its spec in /var/run/cdi, the node's")
	d.p("  owner and mode the operator's: the chart's `deviceUID`/`deviceGID`/`deviceMode`); generic and smarter")
	d.p("  with a `DeviceSpec` (the host path: the container's node has the host node's owner and mode). The pods")
	d.p("  (uid 65534) saw `/dev/kvm` as: hyperlight %s; generic %s; smarter %s (the host's node: `0660`", dev("hyperlight"), dev("generic"), dev("smarter"))
	d.p("  root:root): with the peers a non-root workload cannot open it. hyperlight's Allocate also runs its")
	d.p("  probe helper (a fork and exec proving the device usable) before it answers: the Allocate row above.")
	d.p("- **Resource names.** generic takes a domain and a name (so it can stand in for ours under")
	d.p("  `hyperlight.dev/hypervisor`); smarter names every resource `smarter-devices/<device>`: a workload written")
	d.p("  for one does not schedule with the other.")
	d.p("- **Kubelet restart.** All three re-register by themselves (hyperlight: inotify on the device-plugins")
	d.p("  directory and a stat backstop; generic: its socket checked every second, then %s before it serves", "a 5 s wait")
	d.p("  again, deviceplugin/plugin.go `socketCheckInterval`, `restartInterval`; smarter: inotify on kubelet.sock's")
	d.p("  creation): the kubelet-side rows above. A restarted kubelet's first node statuses can carry the Node's")
	d.p("  old figures, so the Node's row is taken once the kubelet's own view has the devices.")
	d.p("")
	d.p("Not measured, and why:")
	d.p("")
	d.p("- NVIDIA's kubevirt-gpu-device-plugin (VFIO GPUs, what the GPU Operator's sandbox device plugin runs): its")
	d.p("  go.mod declares the bare module name `kubevirt-gpu-device-plugin`, not an import path, and the Go module")
	d.p("  proxy answers 403 for `github.com/NVIDIA/kubevirt-gpu-device-plugin`: it cannot be built from the proxy.")
	d.p("- The original Go Hyperlight device plugin: no module the proxy serves (403 for")
	d.p("  `github.com/hyperlight-dev/hyperlight-device-plugin`, `github.com/hyperlight-dev/hyperlight-k8s-device-plugin`,")
	d.p("  `github.com/deislabs/hyperlight-device-plugin`).")
	d.p("- KubeVirt's `devices.kubevirt.io/kvm` plugin (`kubevirt.io/kubevirt` v1.7.0, pkg/virt-handler/device-manager,")
	d.p("  run inside virt-handler): not measured here for `/dev/kvm` yet; it could be run the way bench/peers/kubevirt")
	d.p("  runs its PCI host device plugin, the VFIO peer of kata, which the next section compares with kata on the")
	d.p("  same VFIO tree (\"VFIO: what each plugin advertises\").")
	d.p("")
	d.p("Re-run: `make bench-peers` (brings up `make cluster` when none is running, leaves it running;")
	d.p("`make cluster-down` removes it); `PEERS_ROUNDS=%s PEERS_IDLE=%s PEERS_BURST=%s make bench-peers` are this run's",
		r.m("rounds"), idle, burst)
	d.p("settings. The raw figures: `<build>/peers/results.tsv`; this section again from them:")
	d.p("`<build>/peers/sdp-peers-report -results <build>/peers/results.tsv -out docs/benchmarks.md`.")
	d.p("")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func trimS(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}

func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "sdp-peers-report: "+format+"\n", a...)
	os.Exit(1)
}
