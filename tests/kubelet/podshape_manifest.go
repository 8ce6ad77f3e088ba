package kubelet

// What the pod shape takes from the manifests (see podshape.go), and the daemons' pods.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ---- the manifests

// Manifest is what the tests take from one container of a manifest (or the kata chart's
// values): its args, its literal env values and its memory limit.
type Manifest struct {
	Path        string
	Args        []string
	Env         []string // KEY=value, only the entries with a literal value
	MemoryLimit int64
}

// SourceDir finds the repository (the directory holding deploy/hyperlight): $SDP_SOURCE_DIR,
// else upwards from the working directory, else upwards from $SDP_BUILD_DIR.
func SourceDir() (string, error) {
	ok := func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "deploy/hyperlight/30-device-plugin.yaml"))
		return err == nil
	}
	if d := os.Getenv("SDP_SOURCE_DIR"); d != "" && ok(d) {
		return d, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if b, err := BuildDir(); err == nil {
		if real, err := filepath.EvalSymlinks(b); err == nil {
			starts = append(starts, real)
		}
	}
	for _, d := range starts {
		for ; d != "/" && d != "."; d = filepath.Dir(d) {
			if ok(d) {
				return d, nil
			}
		}
	}
	return "", errors.New("cannot find the repository (deploy/hyperlight): set SDP_SOURCE_DIR")
}

// Manifest files, relative to the repository.
const (
	HyperlightManifest   = "deploy/hyperlight/30-device-plugin.yaml"
	DeviceAccessManifest = "deploy/hyperlight/20-device-access.yaml"
	KataValues           = "deploy/helm/kata-device-plugin/values.yaml"
)

// ReadManifest reads the first container's args, literal env and resources.limits.memory from a
// manifest, or resources.limits.memory and logLevel (as LOG_LEVEL) from the kata chart's
// values. A line-based reader for these files' layout (no YAML library in Debian's gocode).
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Path: path}
	lines := strings.Split(string(b), "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	section := func(i int) (end int) { // the lines indented deeper than line i
		for end = i + 1; end < len(lines); end++ {
			if t := strings.TrimSpace(lines[end]); t != "" && !strings.HasPrefix(t, "#") && indent(lines[end]) <= indent(lines[i]) {
				break
			}
		}
		return end
	}
	unquote := func(v string) string { return strings.Trim(strings.TrimSpace(v), `"'`) }
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		switch {
		case t == "limits:" && m.MemoryLimit == 0:
			for j := i + 1; j < section(i); j++ {
				if v := strings.TrimSpace(lines[j]); strings.HasPrefix(v, "memory:") {
					if m.MemoryLimit, err = ParseQuantity(unquote(strings.TrimPrefix(v, "memory:"))); err != nil {
						return nil, fmt.Errorf("%s:%d: %v", path, j+1, err)
					}
				}
			}
		case strings.HasPrefix(t, "args:") && m.Args == nil:
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(t, "args:"))), &m.Args); err != nil {
				return nil, fmt.Errorf("%s:%d: args: %v", path, i+1, err)
			}
		case t == "env:" && m.Env == nil:
			m.Env = []string{}
			name := ""
			for j := i + 1; j < section(i); j++ {
				v := strings.TrimSpace(lines[j])
				if strings.HasPrefix(v, "- name:") {
					name = unquote(strings.TrimPrefix(v, "- name:"))
				} else if strings.HasPrefix(v, "value:") && name != "" {
					m.Env = append(m.Env, name+"="+unquote(strings.TrimPrefix(v, "value:")))
					name = ""
				}
			}
		case strings.HasPrefix(t, "logLevel:") && indent(lines[i]) == 0:
			m.Env = append(m.Env, "LOG_LEVEL="+unquote(strings.TrimPrefix(t, "logLevel:")))
		}
	}
	if m.MemoryLimit == 0 {
		return nil, fmt.Errorf("%s: no resources.limits.memory", path)
	}
	return m, nil
}

// ParseQuantity parses a Kubernetes memory quantity with a binary suffix or none ("64Mi").
func ParseQuantity(q string) (int64, error) {
	mult := int64(1)
	for i, suf := range []string{"Ki", "Mi", "Gi"} {
		if strings.HasSuffix(q, suf) {
			q, mult = strings.TrimSuffix(q, suf), int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("memory quantity %q: want a positive number with Ki, Mi, Gi or no suffix", q)
	}
	return n * mult, nil
}

// ---- the daemons' pods

// podSources returns the daemon binary name in the build directory and the manifest file
// (relative to the source tree), read.
func podSources(binary, manifest string) (string, *Manifest, error) {
	src, err := SourceDir()
	if err != nil {
		return "", nil, err
	}
	build, err := BuildDir()
	if err != nil {
		return "", nil, err
	}
	bin, err := Executable(build, binary)
	if err != nil {
		return "", nil, err
	}
	m, err := ReadManifest(filepath.Join(src, manifest))
	if err != nil {
		return "", nil, err
	}
	return bin, m, nil
}

// HyperlightPod is the main plugin's pod (deploy/hyperlight/30-device-plugin.yaml) on node:
// /dev/kvm injected (a copy of the node's), the node's /dev read-only at /host-dev,
// HOST_DEVICE_DIR=/host-dev, the kubelet and CDI directories; extra env last. With
// deviceAccess, the bootstrap pod (20-device-access.yaml): no device, no CDI directory.
func HyperlightPod(node *Node, deviceAccess bool, extraEnv ...string) (PodSpec, *Manifest, error) {
	file, name := HyperlightManifest, "hyperlight"
	if deviceAccess {
		file, name = DeviceAccessManifest, "access"
	}
	bin, m, err := podSources(HyperlightBinary, file)
	if err != nil {
		return PodSpec{}, nil, err
	}
	s := PodSpec{Name: name, Binary: bin, Args: m.Args, Env: MergeEnv(m.Env, extraEnv...), MemoryLimit: m.MemoryLimit,
		Shim: true, Binds: []PodBind{{node.KubeletDir, PodKubeletDir, false}, {node.DevDir, PodHostDev, true}}}
	if !deviceAccess {
		var st unix.Stat_t
		if err := unix.Stat(node.KVMPath(), &st); err != nil {
			return PodSpec{}, nil, fmt.Errorf("the node's %s: %v", node.KVMPath(), err)
		}
		s.DevNodes = []PodDevNode{{"/dev/kvm", unix.Major(st.Rdev), unix.Minor(st.Rdev)}}
		s.Binds = append(s.Binds, PodBind{node.CDIDir, PodCDIDir, false})
	}
	return s, m, nil
}

// KataPod is the kata chart's pod on a node with the fake VFIO host tree: /dev/vfio read-only,
// the tree's sysfs read-only at /sys (the container's sysfs), the kubelet and CDI directories.
func KataPod(node *Node, tree *KataTree, extraEnv ...string) (PodSpec, *Manifest, error) {
	bin, m, err := podSources(KataBinary, KataValues)
	if err != nil {
		return PodSpec{}, nil, err
	}
	s := PodSpec{Name: "kata", Binary: bin, Env: MergeEnv(m.Env, extraEnv...), MemoryLimit: m.MemoryLimit,
		Binds: []PodBind{{node.KubeletDir, PodKubeletDir, false}, {node.CDIDir, PodCDIDir, false},
			{filepath.Join(tree.Root, "dev/vfio"), "/dev/vfio", true}, {filepath.Join(tree.Root, "sys"), "/sys", true}}}
	return s, m, nil
}
