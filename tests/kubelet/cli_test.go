package kubelet

// The command line and the first lines an operator reads: -h as --help (both daemons and the
// node-label helper), what --help says (every environment variable, the exit statuses), one
// warning for an invalid LOG_LEVEL, a negative DEVICE_COUNT called negative, and kata's
// missing /dev/vfio explained.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHelpShortFlag(t *testing.T) {
	build, err := BuildDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bin  string
		want []string // in --help's text
	}{
		{HyperlightBinary, []string{"-h, --help", "DEVICE_COUNT", "DEVICE_UID", "DEVICE_MODE", "HOST_DEVICE_DIR", "NODE_NAME",
			"NODE_LABELS", "PLUGIN_API", "LOG_LEVEL", "METRICS_ADDRESS", "SDP_SECCOMP", "Exit status", "1 for a startup error",
			"2 for a bad argument"}},
		{KataBinary, []string{"-h, --help", "RESOURCE_NAMING", "VFIO_BACKEND", "LOG_LEVEL", "METRICS_ADDRESS", "SDP_SECCOMP",
			"Exit status", "1 for a startup error", "2 for a bad argument", "3 when the VFIO device set changed"}},
		{"hyperlight-label-node", []string{"API-server helper", "--dp-helper label-node", "--dp-helper dra-claim", "--dp-helper dra-slices"}},
		{"sdp-kube-api", []string{"DRA helper", "--dp-helper dra-claim", "--dp-helper dra-slices"}},
	} {
		t.Run(tc.bin, func(t *testing.T) {
			bin, err := Executable(build, tc.bin)
			if err != nil {
				t.Fatal(err)
			}
			run := func(arg string) Result {
				r, err := RunCommand(exitBound, bin, PlainDaemonEnv(t.TempDir()), arg)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			long, short := run("--help"), run("-h")
			if long.Code != 0 || long.Stdout == "" || long.Stderr != "" {
				t.Fatalf("--help: exit %d, stdout %q, stderr %q; want exit 0, the help on stdout only",
					long.Code, long.Stdout, long.Stderr)
			}
			if short != long {
				t.Errorf("-h: exit %d, stdout %q, stderr %q; want what --help gives", short.Code, short.Stdout, short.Stderr)
			}
			flat := strings.Join(strings.Fields(long.Stdout), " ") // a phrase may wrap
			for _, w := range tc.want {
				if !strings.Contains(flat, w) {
					t.Errorf("--help does not mention %q:\n%s", w, long.Stdout)
				}
			}
			if r := run("-x"); r.Code != 2 || !strings.Contains(r.Stderr, "-x") && tc.bin != "hyperlight-label-node" && tc.bin != "sdp-kube-api" {
				t.Errorf("-x: exit %d, stderr %q; want exit 2 naming the argument", r.Code, r.Stderr)
			}
		})
	}
}

// countWarnings counts the warn lines that mention substr.
func countWarnings(d *Daemon, substr string) int {
	n := 0
	for _, l := range d.Stderr.Lines() {
		if logField(l, "level") == "warn" && strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func TestHyperlightInvalidLogLevelWarnsOnce(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "LOG_LEVEL=loud")
	s.ready(3) // start-up is over: every start-up line is in
	if n := countWarnings(s.d, "LOG_LEVEL"); n != 1 {
		t.Errorf("%d warnings about LOG_LEVEL=loud, want 1; log:\n%s", n, s.d.Log())
	}
	line := logLines(s.d, "warn", "invalid LOG_LEVEL, keeping info")
	if len(line) != 1 || !strings.Contains(line[0], "value=loud") || !strings.Contains(line[0], "expected=debug|info|warn|error") {
		t.Errorf("LOG_LEVEL warning %q, want value=loud and the accepted values", line)
	}
}

func TestHyperlightNegativeDeviceCount(t *testing.T) {
	s := prepare(t, newNode(t, true))
	r := s.run(DaemonEnv(s.node.Root, "DEVICE_COUNT=-5"))
	lines := logLines(&Daemon{Stderr: logBufferOf(r.Stderr)}, "error", "invalid configuration")
	if r.Code != 1 || len(lines) != 1 {
		t.Fatalf("DEVICE_COUNT=-5: exit %d, %d 'invalid configuration' lines; want exit 1 and one; stderr:\n%s",
			r.Code, len(lines), r.Stderr)
	}
	if !strings.Contains(lines[0], "DEVICE_COUNT=-5 is negative: out of range 1..") {
		t.Errorf("line %q, want it to say DEVICE_COUNT=-5 is negative and give the range", lines[0])
	}
	if strings.Contains(r.Stderr, "not a decimal integer") {
		t.Errorf("-5 called not a decimal integer:\n%s", r.Stderr)
	}
	if socks, _ := s.node.PluginSockets(); len(socks) != 0 || s.k.Registrations(HyperlightResource) != 0 {
		t.Errorf("an invalid configuration served or registered")
	}
}

// logBufferOf wraps a finished command's stderr for logLines.
func logBufferOf(s string) *LogBuffer {
	b := &LogBuffer{}
	b.Write([]byte(s))
	return b
}

// No /dev/vfio, or no /dev/vfio/devices: one warning naming the missing directory and the usual
// causes, at start; a rescan that finds it still missing says it at debug only.
func TestKataVFIODirMissing(t *testing.T) {
	const msg = "VFIO directory missing, nothing to scan"
	for _, tc := range []struct {
		name, remove, dir, env string
		words                  []string
	}{
		// auto without /dev/vfio/devices is legacy: its input, /dev/vfio, is what is missing
		{"no-dev-vfio", "dev/vfio", "/dev/vfio", "", []string{"vfio-pci", "hostPath /dev/vfio"}},
		{"no-dev-vfio-iommufd", "dev/vfio", "/dev/vfio", "VFIO_BACKEND=iommufd", []string{"vfio-pci", "iommufd", "hostPath /dev/vfio"}},
		// iommufd asked for on a kernel without cdevs: the kernel config line
		{"no-devices-dir", "dev/vfio/devices", "/dev/vfio/devices", "VFIO_BACKEND=iommufd",
			[]string{"CONFIG_IOMMUFD", "CONFIG_VFIO_DEVICE_CDEV", "VFIO_BACKEND=legacy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newKata(t)
			s.must(os.RemoveAll(filepath.Join(s.node.Root, tc.remove)))
			if tc.env != "" {
				s.startDaemon(tc.env)
			} else {
				s.startDaemon()
			}
			l := s.waitLogMsg(startBound, "warn", msg)
			for _, w := range append([]string{"dir=" + tc.dir + " "}, tc.words...) {
				if !strings.Contains(l, w) {
					t.Errorf("line %q lacks %q", l, w)
				}
			}
			s.waitLogMsg(startBound, "warn", "no VFIO device matches the table; nothing to advertise")
			if tc.env != "" && tc.dir == "/dev/vfio" {
				// /dev/vfio appearing wakes the watch: a rescan, devices/ still missing.
				s.must(os.Mkdir(filepath.Join(s.node.Root, "dev/vfio"), 0o755))
				s.waitLogMsg(eventBound, "debug", msg, "dir=/dev/vfio/devices ")
			}
			if n := len(logLines(s.d, "warn", msg)); n != 1 {
				t.Errorf("%d warn lines %q, want 1; log:\n%s", n, msg, s.d.Log())
			}
		})
	}
}

// Error fields carry the errno's name, not a raw number: a node without /var/run (the CDI
// directory's parent: the daemon creates only the CDI directory) makes the CDI writer fail
// (debug) with ENOENT.
func TestDebugErrorNamed(t *testing.T) {
	s := prepare(t, newNode(t, true))
	if err := os.RemoveAll(filepath.Dir(s.node.CDIDir)); err != nil {
		t.Fatal(err)
	}
	s.startDaemon("DEVICE_COUNT=3", "LOG_LEVEL=debug")
	l := waitLine(t, s.d, startBound, "debug", "cdi: sync failed")
	if !strings.Contains(l, " error=ENOENT") {
		t.Errorf("line %q, want error=ENOENT", l)
	}
	for _, l := range s.d.Stderr.Lines() {
		if f := logField(l, "error"); f != "" && strings.Trim(f, "-0123456789") == "" {
			t.Errorf("raw error number in %q", l)
		}
		if strings.Contains(l, " errno=") {
			t.Errorf("raw errno in %q", l)
		}
	}
}
