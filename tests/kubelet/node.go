package kubelet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The hyperlight daemon's contract.
const (
	HyperlightResource = "hyperlight.dev/hypervisor"
	HyperlightBinary   = "hyperlight-device-plugin"
	HyperlightCDIFile  = "hyperlight.json"
	HyperlightCDIName  = "hyperlight.dev/hypervisor=kvm"
	KVMMajor, KVMMinor = 10, 232
	// ShimStateFile is the hypervisor shim's state file under the node root (see DaemonEnv).
	ShimStateFile = "hvshim.state"
)

// The companion devices (hyperlight/companion.h): name, node under /dev, the kernel's number,
// the shim's knob naming its fake.
type Companion struct {
	Name, Path   string
	Major, Minor uint32
	ShimKnob     string
}

var Companions = []Companion{
	{"tun", "/dev/net/tun", 10, 200, "HVSHIM_TUN"},
	{"vhost-net", "/dev/vhost-net", 10, 238, "HVSHIM_VHOST_NET"},
	{"vhost-vsock", "/dev/vhost-vsock", 10, 241, "HVSHIM_VHOST_VSOCK"},
}

// ShimCompanionKnobs names each companion's node under root as the shim's fake of it.
func ShimCompanionKnobs(root string) []string {
	var kv []string
	for _, c := range Companions {
		kv = append(kv, c.ShimKnob+"="+filepath.Join(root, c.Path))
	}
	return kv
}

// CompanionPath is <root><c.Path>.
func (n *Node) CompanionPath(c Companion) string { return filepath.Join(n.Root, c.Path) }

// MknodCompanion creates c's node (its directory too) with the kernel's number, mode 0666.
func (n *Node) MknodCompanion(c Companion) error {
	p := n.CompanionPath(c)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return Mknod(p, c.Major, c.Minor)
}

// Node is a simulated node under a temporary root (the daemon's SDP_TEST_ROOT).
type Node struct {
	Root       string
	KubeletDir string // <root>/var/lib/kubelet/device-plugins
	CDIDir     string // <root>/var/run/cdi
	DevDir     string // <root>/dev
	top        string // the temporary directory Remove deletes (Root or its parent)
}

// NewNode creates a short temporary root (unix socket paths are limited to 107 bytes) with the
// kubelet, CDI and /dev directories.
func NewNode() (*Node, error) {
	return NewNodeKubeletDirLen(0)
}

// NewNodeKubeletDirLen is NewNode with a KubeletDir of exactly dirLen bytes (0: as short as it
// comes): the root is a directory padded to length inside the temporary one.
func NewNodeKubeletDirLen(dirLen int) (*Node, error) {
	top, err := os.MkdirTemp("", "sdp-")
	if err != nil {
		return nil, err
	}
	root := top
	if dirLen > 0 {
		pad := dirLen - len(top) - len("/") - len("/var/lib/kubelet/device-plugins")
		if pad < 1 {
			os.RemoveAll(top)
			return nil, fmt.Errorf("a kubelet directory of %d bytes does not fit under %s", dirLen, top)
		}
		root = filepath.Join(top, strings.Repeat("p", pad))
	}
	n := &Node{
		top:        top,
		Root:       root,
		KubeletDir: filepath.Join(root, "var/lib/kubelet/device-plugins"),
		CDIDir:     filepath.Join(root, "var/run/cdi"),
		DevDir:     filepath.Join(root, "dev"),
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{n.KubeletDir, 0o750}, {n.CDIDir, 0o755}, {n.DevDir, 0o755}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			os.RemoveAll(top)
			return nil, err
		}
	}
	return n, nil
}

// Remove deletes the whole root.
func (n *Node) Remove() error { return os.RemoveAll(n.top) }

// KVMPath is <root>/dev/kvm.
func (n *Node) KVMPath() string { return filepath.Join(n.DevDir, "kvm") }

// CDIPath is <root>/var/run/cdi/hyperlight.json.
func (n *Node) CDIPath() string { return filepath.Join(n.CDIDir, HyperlightCDIFile) }

// SocketPath is <kubelet dir>/<name>.
func (n *Node) SocketPath(name string) string { return filepath.Join(n.KubeletDir, name) }

// MknodKVM creates <root>/dev/kvm as the character device 10:232, mode 0666 (needs root).
func (n *Node) MknodKVM() error { return Mknod(n.KVMPath(), KVMMajor, KVMMinor) }

// Mknod creates a character device node with mode 0666.
func Mknod(path string, major, minor uint32) error {
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		return fmt.Errorf("mknod %s c %d %d: %v", path, major, minor, err)
	}
	return os.Chmod(path, 0o666) // umask
}

// ShimStatePath is <root>/hvshim.state, the file the preloaded shim re-reads its knobs from at
// every open of the fake device and every ioctl on it (tests/fakes/hvshim.c).
func (n *Node) ShimStatePath() string { return filepath.Join(n.Root, ShimStateFile) }

// SetShim replaces the shim's state file with knobs ("HVSHIM_API_VERSION=11",
// "HVSHIM_HANG=1"...). The file replaces the environment as a whole, so it always names the
// fake device too: HVSHIM_DEVICE=<root>/dev/kvm unless knobs set HVSHIM_DEVICE themselves. The
// file is written aside and renamed into place: a probe never reads half of it. The companions'
// fakes (ShimCompanionKnobs) are named too, unless knobs name them.
func (n *Node) SetShim(knobs ...string) error {
	var b bytes.Buffer
	device := true
	named := map[string]bool{}
	for _, kv := range knobs {
		if i := strings.IndexByte(kv, '='); i > 0 {
			named[kv[:i]] = true
		}
	}
	for _, kv := range ShimCompanionKnobs(n.Root) {
		if !named[kv[:strings.IndexByte(kv, '=')]] {
			b.WriteString(kv + "\n")
		}
	}
	for _, kv := range knobs {
		i := strings.IndexByte(kv, '=')
		if i <= 0 || !strings.HasPrefix(kv, "HVSHIM_") || strings.ContainsAny(kv, "\n\r") {
			return fmt.Errorf("SetShim: %q is not a HVSHIM_KEY=value line", kv)
		}
		if kv[:i] == "HVSHIM_DEVICE" {
			device = false
		}
	}
	if device {
		fmt.Fprintf(&b, "HVSHIM_DEVICE=%s\n", n.KVMPath())
	}
	for _, kv := range knobs {
		b.WriteString(kv + "\n")
	}
	tmp := n.ShimStatePath() + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.ShimStatePath())
}

// ClearShim removes the state file: the shim falls back to the daemon's environment (the fake
// device, no faults).
func (n *Node) ClearShim() error {
	if err := os.Remove(n.ShimStatePath()); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// PluginSockets lists the sockets in the kubelet directory other than kubelet.sock, sorted.
func (n *Node) PluginSockets() ([]string, error) {
	entries, err := os.ReadDir(n.KubeletDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 && e.Name() != KubeletSocket {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// IsSocket reports whether path exists and is a socket (without following symlinks).
func IsSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// CDISpec is the subset of the CDI spec (specs-go/config.go) the tests check.
type CDISpec struct {
	CDIVersion     string          `json:"cdiVersion"`
	Kind           string          `json:"kind"`
	Devices        []CDIDevice     `json:"devices"`
	ContainerEdits *CDIEdits       `json:"containerEdits,omitempty"`
	Annotations    json.RawMessage `json:"annotations,omitempty"`
}

// CDIDevice is one named device of a spec.
type CDIDevice struct {
	Name           string   `json:"name"`
	ContainerEdits CDIEdits `json:"containerEdits"`
}

// CDIEdits are container edits.
type CDIEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []CDIDeviceNode `json:"deviceNodes,omitempty"`
	Mounts      json.RawMessage `json:"mounts,omitempty"`
	Hooks       json.RawMessage `json:"hooks,omitempty"`
}

// CDIDeviceNode is a device node edit. Pointers tell absent from zero.
type CDIDeviceNode struct {
	Path        string  `json:"path"`
	HostPath    string  `json:"hostPath,omitempty"`
	Type        string  `json:"type,omitempty"`
	Major       *int64  `json:"major,omitempty"`
	Minor       *int64  `json:"minor,omitempty"`
	FileMode    *uint32 `json:"fileMode,omitempty"`
	Permissions string  `json:"permissions,omitempty"`
	UID         *uint32 `json:"uid,omitempty"`
	GID         *uint32 `json:"gid,omitempty"`
}

// ParseCDI decodes a CDI spec strictly as JSON (trailing data is an error).
func ParseCDI(data []byte) (*CDISpec, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var s CDISpec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("CDI spec is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("CDI spec has trailing data after the JSON object")
	}
	return &s, nil
}

// HyperlightDefaultMode is DEVICE_MODE's default: the device node's permission bits in the
// workload (the spec's fileMode), read and write for DEVICE_UID and DEVICE_GID only.
const HyperlightDefaultMode = 0o660

// CheckHyperlightCDI checks a parsed hyperlight spec against the contract for a KVM node: the
// device node owned uid:gid with the permission bits mode (fileMode, always present: without it
// the runtime picks the mode, containerd's CDI library the host node's, 0666 on most hosts).
func CheckHyperlightCDI(s *CDISpec, uid, gid, mode uint32) error {
	if s.CDIVersion != "0.3.0" {
		return fmt.Errorf("cdiVersion %q, want \"0.3.0\"", s.CDIVersion)
	}
	if s.Kind != HyperlightResource {
		return fmt.Errorf("kind %q, want %q", s.Kind, HyperlightResource)
	}
	if len(s.Devices) != 1 {
		return fmt.Errorf("%d devices, want 1", len(s.Devices))
	}
	d := s.Devices[0]
	if d.Name != "kvm" {
		return fmt.Errorf("device name %q, want \"kvm\"", d.Name)
	}
	nodes := d.ContainerEdits.DeviceNodes
	if len(nodes) != 1 {
		return fmt.Errorf("%d deviceNodes, want 1", len(nodes))
	}
	dn := nodes[0]
	if dn.Path != "/dev/kvm" || dn.Type != "c" || dn.Permissions != "rw" {
		return fmt.Errorf("deviceNode path=%q type=%q permissions=%q, want /dev/kvm c rw", dn.Path, dn.Type, dn.Permissions)
	}
	if dn.HostPath != "" && dn.HostPath != "/dev/kvm" {
		return fmt.Errorf("deviceNode hostPath %q, want none or /dev/kvm", dn.HostPath)
	}
	if dn.UID == nil || *dn.UID != uid || dn.GID == nil || *dn.GID != gid {
		return fmt.Errorf("deviceNode uid/gid %v/%v, want %d/%d", ptr(dn.UID), ptr(dn.GID), uid, gid)
	}
	if dn.FileMode == nil || *dn.FileMode != mode {
		return fmt.Errorf("deviceNode fileMode %v, want %#o (%d)", octal(dn.FileMode), mode, mode)
	}
	want := []string{"HYPERLIGHT_HYPERVISOR=kvm", "HYPERLIGHT_DEVICE_PATH=/dev/kvm"}
	env := map[string]bool{}
	for _, e := range d.ContainerEdits.Env {
		env[e] = true
	}
	for _, w := range want {
		if !env[w] {
			return fmt.Errorf("device env %q lacks %q", d.ContainerEdits.Env, w)
		}
	}
	if len(d.ContainerEdits.Env) != len(want) {
		return fmt.Errorf("device env %q, want exactly %q", d.ContainerEdits.Env, want)
	}
	return nil
}

func octal(p *uint32) interface{} {
	if p == nil {
		return "absent"
	}
	return fmt.Sprintf("%#o (%d)", *p, *p)
}

func ptr(p *uint32) interface{} {
	if p == nil {
		return "absent"
	}
	return *p
}
