package kubelet

// A fake VFIO host for the kata daemon: IOMMUFD character devices made with mknod under
// <root>/dev/vfio/devices and their sysfs identities under <root>/sys, laid out as the kata
// contract says (the real kernel layout, re-rooted):
//
//	<root>/dev/vfio/devices/vfioN              character device MAJ:N
//	<root>/sys/class/vfio-dev/vfioN/dev        "MAJ:N\n"
//	<root>/sys/class/vfio-dev/vfioN/device     -> ../../../devices/pci0000:00/<BDF>
//	<root>/sys/devices/pci0000:00/<BDF>/vendor "0x%04x\n"
//	                                   /device "0x%04x\n" (the model: RESOURCE_NAMING=sku)
//	                                   /class  "0x%06x\n"
//	                                   /numa_node "%d\n"
//
// The hostile helpers break one entry at a time (missing files, garbage, a symlink loop, a
// link leaving the root, a number mismatch) so a test can check that exactly that entry is
// skipped.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The kata daemon's contract.
const (
	KataBinary        = "kata-device-plugin"
	KataGPU           = "nvidia.com/gpu"
	KataNVSwitch      = "nvidia.com/nvswitch"
	NvidiaVendor      = 0x10de
	ClassGPU          = 0x030200 // 3D controller
	ClassNVSwitch     = 0x068000 // bridge: other
	KataCDIVersion    = "0.5.0"  // the minimum: device names start with a digit
	KataIdlePrefix    = "kata-idle"
	KataVFIOMajor     = 237 // any major the host does not use: the daemon only stats the nodes
	KataExitSetChange = 3   // exit status when the VFIO device set changed
	// KataContainerDir is where the cdevs live on the host and in the container.
	KataContainerDir = "/dev/vfio/devices"
)

// KataResources are the table's rows, in table order.
var KataResources = []string{KataGPU, KataNVSwitch}

// kataSplit splits "vendor/class".
func kataSplit(resource string) (vendor, class string) {
	i := strings.IndexByte(resource, '/')
	return resource[:i], resource[i+1:]
}

// KataSpecFile is the CDI spec file name of a resource: "kata.nvidia.com-gpu.yaml".
func KataSpecFile(resource string) string {
	v, c := kataSplit(resource)
	return "kata." + v + "-" + c + ".yaml"
}

// KataSocketPrefix is the endpoint socket prefix of a resource: "kata-nvidia.com-gpu".
func KataSocketPrefix(resource string) string {
	return "kata-" + strings.ReplaceAll(resource, "/", "-")
}

// KataAnnotationKey is the Allocate annotation for a request whose first ID is firstID:
// "cdi.k8s.io/kata.nvidia.com-gpu_0".
func KataAnnotationKey(resource, firstID string) string {
	v, c := kataSplit(resource)
	return "cdi.k8s.io/kata." + v + "-" + c + "_" + firstID
}

// PCIFunc is one PCI function's sysfs identity.
type PCIFunc struct {
	BDF    string // "dddd:bb:dd.f"
	Vendor uint16
	Class  uint32
	NUMA   int    // written to numa_node; -1 = unknown
	Device uint16 // the PCI device ID (the model); 0 writes DefaultDeviceID
}

// DefaultDeviceID is the "device" of a PCIFunc that names none: GH100 [H100 SXM5 80GB].
const DefaultDeviceID = 0x2330

// Model is f with the PCI device ID id.
func (f PCIFunc) Model(id uint16) PCIFunc {
	f.Device = id
	return f
}

// GPU is an NVIDIA 3D controller at bdf on numa.
func GPU(bdf string, numa int) PCIFunc {
	return PCIFunc{BDF: bdf, Vendor: NvidiaVendor, Class: ClassGPU, NUMA: numa}
}

// NVSwitch is an NVIDIA "bridge: other" function at bdf on numa.
func NVSwitch(bdf string, numa int) PCIFunc {
	return PCIFunc{BDF: bdf, Vendor: NvidiaVendor, Class: ClassNVSwitch, NUMA: numa}
}

// KataTree is the fake VFIO host under a node root.
type KataTree struct {
	Root       string // the daemon's SDP_TEST_ROOT
	DevicesDir string // <root>/dev/vfio/devices
	ClassDir   string // <root>/sys/class/vfio-dev
	PCIDir     string // <root>/sys/devices/pci0000:00
	Major      uint32
	// KernelLayout: class entries are symlinks into the PCI device directories (see AddClass).
	KernelLayout bool
}

// NewKataTree creates the three directories under root (which must exist).
func NewKataTree(root string) (*KataTree, error) {
	t := &KataTree{
		Root:       root,
		DevicesDir: filepath.Join(root, "dev/vfio/devices"),
		ClassDir:   filepath.Join(root, "sys/class/vfio-dev"),
		PCIDir:     filepath.Join(root, "sys/devices/pci0000:00"),
		Major:      KataVFIOMajor,
	}
	for _, d := range []string{t.DevicesDir, t.ClassDir, t.PCIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// VFIOName is "vfioN".
func VFIOName(n int) string { return fmt.Sprintf("vfio%d", n) }

// CdevPath is <root>/dev/vfio/devices/vfioN.
func (t *KataTree) CdevPath(n int) string { return filepath.Join(t.DevicesDir, VFIOName(n)) }

// ContainerPath is /dev/vfio/devices/vfioN: the path the CDI spec must name.
func (t *KataTree) ContainerPath(n int) string { return KataContainerDir + "/" + VFIOName(n) }

// ClassEntry is <root>/sys/class/vfio-dev/vfioN.
func (t *KataTree) ClassEntry(n int) string { return filepath.Join(t.ClassDir, VFIOName(n)) }

// PCIPath is <root>/sys/devices/pci0000:00/<bdf>.
func (t *KataTree) PCIPath(bdf string) string { return filepath.Join(t.PCIDir, bdf) }

// DeviceLink is the relative link target of vfioN/device for a PCI function at bdf.
func DeviceLink(bdf string) string { return "../../../devices/pci0000:00/" + bdf }

// AddPCI writes the PCI function's directory with vendor, device, class and numa_node in the
// kernel's formats.
func (t *KataTree) AddPCI(f PCIFunc) error {
	dir := t.PCIPath(f.BDF)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, val := range map[string]string{
		"vendor":    fmt.Sprintf("0x%04x\n", f.Vendor),
		"device":    fmt.Sprintf("0x%04x\n", f.deviceID()),
		"class":     fmt.Sprintf("0x%06x\n", f.Class),
		"numa_node": fmt.Sprintf("%d\n", f.NUMA),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0o444); err != nil {
			return err
		}
	}
	return nil
}

func (f PCIFunc) deviceID() uint16 {
	if f.Device == 0 {
		return DefaultDeviceID
	}
	return f.Device
}

// AddClass creates sysfs class entry vfioN: dev "MAJ:N\n" and the device link to bdf.
// With KernelLayout the entry is where the kernel puts it, under the PCI device, and the
// class entry is a symlink to it:
//
//	<root>/sys/class/vfio-dev/vfioN -> ../../devices/pci0000:00/<BDF>/vfio-dev/vfioN
//	<root>/sys/devices/pci0000:00/<BDF>/vfio-dev/vfioN/device -> ../../../<BDF>
//
// so "device" resolves only from the entry's real location, not lexically from the class path.
func (t *KataTree) AddClass(n int, bdf string) error {
	dir, link := t.ClassEntry(n), DeviceLink(bdf)
	if t.KernelLayout {
		dir = filepath.Join(t.PCIPath(bdf), "vfio-dev", VFIOName(n))
		link = "../../../" + bdf
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if t.KernelLayout {
		target := "../../devices/pci0000:00/" + bdf + "/vfio-dev/" + VFIOName(n)
		if err := os.Symlink(target, t.ClassEntry(n)); err != nil {
			return err
		}
	}
	if err := t.WriteDev(n, fmt.Sprintf("%d:%d\n", t.Major, n)); err != nil {
		return err
	}
	return os.Symlink(link, filepath.Join(dir, "device"))
}

// AddCdev creates the character device vfioN as MAJ:N.
func (t *KataTree) AddCdev(n int) error { return t.AddCdevNumber(n, t.Major, uint32(n)) }

// AddCdevNumber creates the character device vfioN with any number.
func (t *KataTree) AddCdevNumber(n int, major, minor uint32) error {
	return Mknod(t.CdevPath(n), major, minor)
}

// Add creates a complete, consistent VFIO device N for f: PCI directory, class entry, cdev.
func (t *KataTree) Add(n int, f PCIFunc) error {
	if err := t.AddPCI(f); err != nil {
		return err
	}
	if err := t.AddClass(n, f.BDF); err != nil {
		return err
	}
	return t.AddCdev(n)
}

// RemoveCdev deletes the character device vfioN.
func (t *KataTree) RemoveCdev(n int) error { return os.Remove(t.CdevPath(n)) }

// WriteDev replaces vfioN/dev with content.
func (t *KataTree) WriteDev(n int, content string) error {
	return os.WriteFile(filepath.Join(t.ClassEntry(n), "dev"), []byte(content), 0o444)
}

// RemoveClassFile removes vfioN/<name> ("dev" or "device").
func (t *KataTree) RemoveClassFile(n int, name string) error {
	return os.Remove(filepath.Join(t.ClassEntry(n), name))
}

// WritePCIAttr replaces <bdf>/<name> with content (garbage, a different vendor...).
func (t *KataTree) WritePCIAttr(bdf, name, content string) error {
	return os.WriteFile(filepath.Join(t.PCIPath(bdf), name), []byte(content), 0o444)
}

// RemovePCIAttr removes <bdf>/<name> ("vendor", "device", "class", "numa_node").
func (t *KataTree) RemovePCIAttr(bdf, name string) error {
	return os.Remove(filepath.Join(t.PCIPath(bdf), name))
}

// Relink replaces vfioN/device with a symlink to target (used as is: relative or absolute).
func (t *KataTree) Relink(n int, target string) error {
	link := filepath.Join(t.ClassEntry(n), "device")
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.Symlink(target, link)
}

// LoopLink makes vfioN/device a symlink loop: device -> loop -> device (ELOOP on resolution).
func (t *KataTree) LoopLink(n int) error {
	dir := t.ClassEntry(n)
	if err := os.Symlink("device", filepath.Join(dir, "loop")); err != nil {
		return err
	}
	return t.Relink(n, "loop")
}

// CdevNumber returns the major:minor of <root>/dev/vfio/devices/vfioN (it must be a cdev).
func (t *KataTree) CdevNumber(n int) (major, minor uint32, err error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(t.CdevPath(n), &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return 0, 0, fmt.Errorf("%s is not a character device", t.CdevPath(n))
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev), nil
}

// BDFOf resolves vfioN/device inside the root and returns the PCI address it names.
func (t *KataTree) BDFOf(n int) (string, error) {
	target, err := filepath.EvalSymlinks(filepath.Join(t.ClassEntry(n), "device"))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(target, t.Root+"/") {
		return "", fmt.Errorf("vfio%d/device resolves outside the root: %s", n, target)
	}
	return filepath.Base(target), nil
}
