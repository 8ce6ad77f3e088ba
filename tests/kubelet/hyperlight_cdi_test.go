package kubelet

// Scenarios: the owned CDI spec file: content, and repair after deletion, truncation,
// modification, a symlink in its place, a read-only directory and a full file system.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// otherFile puts a file the daemon does not own into the CDI directory; the returned check
// fails the test if it was touched.
func otherFile(t *testing.T, n *Node) func() {
	path := filepath.Join(n.CDIDir, "other-vendor.json")
	content := []byte(`{"cdiVersion":"0.3.0","kind":"example.com/other","devices":[]}` + "\n")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		fi, err := os.Lstat(path)
		got, err2 := os.ReadFile(path)
		if err != nil || err2 != nil || string(got) != string(content) || fi.Mode().Perm() != 0o600 {
			t.Errorf("the daemon touched %s (%v %v)", path, err, err2)
		}
	}
}

func TestHyperlightCDIContent(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "DEVICE_UID=1000", "DEVICE_GID=1001", "DEVICE_MODE=0600")
	s.ready(3)
	s.checkCDI(1000, 1001, 0o600)
	s.advertisedOwner("device_uid=1000 device_gid=1001 device_mode=0600")
	fi, err := os.Lstat(s.node.CDIPath())
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("CDI spec file mode %v (%v), want a regular file 0644", fi.Mode(), err)
	}
	// No temporary files are left in the directory.
	entries, _ := os.ReadDir(s.node.CDIDir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("CDI directory holds %v, want only %s", names, HyperlightCDIFile)
	}
}

// advertisedOwner requires the daemon's msg=advertising line to report the spec's owner and mode
// (want: "device_uid=N device_gid=N device_mode=0NNN"), what an operator reads at start.
func (s *scenario) advertisedOwner(want string) {
	s.t.Helper()
	l, ok := s.d.WaitLog(eventBound, func(l string) bool { return strings.Contains(l, "msg=advertising ") })
	if !ok || !strings.HasSuffix(l, " "+want) {
		s.t.Errorf("msg=advertising line %q, want it ending %q", l, want)
	}
}

// The defaults: the device node owned 65534:65534, mode 0660 (fileMode 432), byte for byte.
func TestHyperlightCDIDefaultOwner(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	s.checkCDI(65534, 65534, HyperlightDefaultMode)
	s.advertisedOwner("device_uid=65534 device_gid=65534 device_mode=0660")
	want := `{
  "cdiVersion": "0.3.0",
  "kind": "hyperlight.dev/hypervisor",
  "devices": [
    {
      "name": "kvm",
      "containerEdits": {
        "deviceNodes": [
          {
            "path": "/dev/kvm",
            "type": "c",
            "permissions": "rw",
            "fileMode": 432,
            "uid": 65534,
            "gid": 65534
          }
        ],
        "env": [
          "HYPERLIGHT_HYPERVISOR=kvm",
          "HYPERLIGHT_DEVICE_PATH=/dev/kvm"
        ]
      }
    }
  ]
}
`
	if got := string(s.readCDI()); got != want {
		t.Errorf("CDI spec:\n%s\nwant:\n%s", got, want)
	}
}

// Invalid DEVICE_UID/DEVICE_GID/DEVICE_MODE keep the default with a warning (design: env contract).
func TestHyperlightCDIInvalidOwner(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "DEVICE_UID=abc", "DEVICE_GID=-5", "DEVICE_MODE=4660")
	s.ready(3)
	s.checkCDI(65534, 65534, HyperlightDefaultMode)
	s.advertisedOwner("device_uid=65534 device_gid=65534 device_mode=0660")
	for _, name := range []string{"DEVICE_UID", "DEVICE_GID", "DEVICE_MODE"} {
		if _, ok := s.d.WaitLog(eventBound, func(l string) bool { return strings.Contains(l, name) }); !ok {
			t.Errorf("no warning naming %s in the log", name)
		}
	}
}

func TestHyperlightCDIDeleted(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	check := otherFile(t, s.node)
	orig := s.readCDI()
	for i := 0; i < 3; i++ { // repeatedly: the watch must survive a repair
		if err := os.Remove(s.node.CDIPath()); err != nil {
			t.Fatal(err)
		}
		d := s.waitCDI(orig, eventBound)
		t.Logf("deleted spec repaired in %v", d.Round(time.Millisecond))
	}
	check()
	s.devices(3, Healthy, eventBound)
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered after a CDI repair")
	}
}

func TestHyperlightCDITruncated(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	check := otherFile(t, s.node)
	orig := s.readCDI()
	for _, size := range []int64{int64(len(orig) / 2), 0} {
		if err := os.Truncate(s.node.CDIPath(), size); err != nil {
			t.Fatal(err)
		}
		d := s.waitCDI(orig, eventBound)
		t.Logf("spec truncated to %d bytes repaired in %v", size, d.Round(time.Millisecond))
	}
	check()
	s.devices(3, Healthy, eventBound)
}

func TestHyperlightCDIModified(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	orig := s.readCDI()
	// Valid JSON with a stale edit, written in place.
	stale := strings.Replace(string(orig), `"rw"`, `"rwm"`, 1)
	if stale == string(orig) {
		t.Fatalf("spec has no \"rw\" permissions to alter:\n%s", orig)
	}
	if err := os.WriteFile(s.node.CDIPath(), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitCDI(orig, eventBound)
	// Replaced by rename (as an editor or another writer would).
	tmp := filepath.Join(s.node.CDIDir, ".other-writer")
	if err := os.WriteFile(tmp, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.node.CDIPath()); err != nil {
		t.Fatal(err)
	}
	s.waitCDI(orig, eventBound)
}

func TestHyperlightCDISymlink(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	orig := s.readCDI()
	// The link points at a file outside the CDI directory: it must never be written through.
	decoy := filepath.Join(s.node.Root, "decoy.json")
	if err := os.WriteFile(decoy, []byte("decoy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(s.node.CDIDir, ".link")
	if err := os.Symlink(decoy, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.node.CDIPath()); err != nil {
		t.Fatal(err)
	}
	s.devices(3, Unhealthy, eventBound)
	fi, err := os.Lstat(s.node.CDIPath())
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink at the CDI path was removed or replaced (%v, %v)", fi, err)
	}
	if target, _ := os.Readlink(s.node.CDIPath()); target != decoy {
		t.Errorf("symlink now points at %q", target)
	}
	if b, _ := os.ReadFile(decoy); string(b) != "decoy\n" {
		t.Errorf("the daemon wrote through the symlink: decoy holds %q", b)
	}
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered instead of reporting Unhealthy on the open stream")
	}
	if err := os.Remove(s.node.CDIPath()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitCDI(orig, backoffBound)
	s.devices(3, Healthy, backoffBound)
	t.Logf("repaired and Healthy %v after the symlink was removed", time.Since(start).Round(time.Millisecond))
}

func TestHyperlightCDIReadOnlyDir(t *testing.T) {
	daemonBinary(t)
	privateMountNamespace(t)
	node := newNode(t, true)
	// The CDI directory becomes its own bind mount before the daemon starts, so every fd the
	// daemon opens on it sees the read-only flag later; a second read-write bind mount of the
	// same directory lets the test damage the file (inotify is per inode: the daemon sees it).
	rw := filepath.Join(node.Root, "cdi-rw")
	if err := os.Mkdir(rw, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, node.CDIDir, "--bind", node.CDIDir, node.CDIDir)
	mount(t, rw, "--bind", node.CDIDir, rw)
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3")
	p := s.ready(3)
	orig := s.readCDI()

	mount(t, "", "-o", "remount,bind,ro", node.CDIDir)
	probe := filepath.Join(node.CDIDir, "probe")
	if err := os.WriteFile(probe, nil, 0o644); !errors.Is(err, syscall.EROFS) {
		os.Remove(probe)
		t.Fatalf("the CDI directory is not read-only after the remount: %v", err)
	}
	if err := os.Remove(filepath.Join(rw, HyperlightCDIFile)); err != nil {
		t.Fatal(err)
	}
	s.devices(3, Unhealthy, eventBound)
	if _, err := os.Lstat(node.CDIPath()); !os.IsNotExist(err) {
		t.Errorf("CDI path while the directory is read-only: %v, want it still missing", err)
	}
	mount(t, "", "-o", "remount,bind,rw", node.CDIDir)
	start := time.Now()
	s.waitCDI(orig, backoffBound)
	s.devices(3, Healthy, backoffBound)
	t.Logf("repaired and Healthy %v after the directory became writable", time.Since(start).Round(time.Millisecond))
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered instead of reporting health on the open stream")
	}
}

// fill writes path until the file system is full (ENOSPC).
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for i := 0; i < 1<<16; i++ {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatalf("%s: the file system never filled up", path)
}

func TestHyperlightCDIDiskFull(t *testing.T) {
	daemonBinary(t)
	privateMountNamespace(t)
	node := newNode(t, true)
	mount(t, node.CDIDir, "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", node.CDIDir)
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3")
	p := s.ready(3)
	orig := s.readCDI()
	filler := filepath.Join(node.CDIDir, "filler.bin")
	fill(t, filler)
	probe := filepath.Join(node.CDIDir, "probe")
	if err := os.WriteFile(probe, []byte("x"), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the CDI directory is not full: %v", err)
	}
	os.Remove(probe)
	// Damage the spec in place (no space is freed): the daemon cannot write a replacement.
	f, err := os.OpenFile(node.CDIPath(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte("X"), 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	s.devices(3, Unhealthy, eventBound)
	if b, _ := os.ReadFile(node.CDIPath()); len(b) == 0 || b[0] != 'X' {
		t.Errorf("the spec changed although the file system is full: %q", b)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitCDI(orig, backoffBound)
	s.devices(3, Healthy, backoffBound)
	t.Logf("repaired and Healthy %v after space was freed", time.Since(start).Round(time.Millisecond))
	entries, _ := os.ReadDir(node.CDIDir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("CDI directory holds %v after recovery, want only %s (temporary files left behind?)", names, HyperlightCDIFile)
	}
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered instead of reporting health on the open stream")
	}
}
