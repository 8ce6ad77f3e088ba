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
	KataVFIOMajor     = 237      // any major the host does not use: the daemon only stats the nodes
	KataExitSetChange = 3        // exit status when the VFIO device set changed
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

// KataSocketPrefix is the endpoint socket prefix of a resource with RESOURCE_NAMING=table:
// "kata-pp49l5" for nvidia.com/gpu.
func KataSocketPrefix(resource string) string {
	return SocketPrefix(KataSocketTag, resource)
}

// The socket prefixes of kata's idle health socket and of every RESOURCE_NAMING=sku endpoint.
var (
	KataIdlePrefix = SocketPrefix(KataSocketTag, "idle")
	KataSKUPrefix  = SocketPrefix(KataSocketTag, "sku")
)

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
	Group  int    // IOMMU group; 0: a group of its own (numbered from 100 per tree)
	Under  string // the bridges above it below pci0000:00 ("0000:00:01.0/0000:01:00.0/0000:02:00.0"); "": on the root bus;
	// a first component "pciDDDD:BB" puts it below that host bridge instead ("pci0000:40/0000:40:01.0"),
	// one "platform" below a platform device's host bridge, as many arm64 hosts lay it out
	// ("platform/4010000000.pcie/pci0000:00/0000:00:01.0")
	Driver string // its driver; "": vfio-pci, NoDriver: none
}

// NoDriver is the Driver of a function bound to no driver.
const NoDriver = "-"

// InGroup is f in IOMMU group g.
func (f PCIFunc) InGroup(g int) PCIFunc {
	f.Group = g
	return f
}

// Below is f under the bridge path under (see PCIFunc.Under).
func (f PCIFunc) Below(under string) PCIFunc {
	f.Under = under
	return f
}

// BoundTo is f bound to driver drv (NoDriver: none).
func (f PCIFunc) BoundTo(drv string) PCIFunc {
	f.Driver = drv
	return f
}

// Audio is an HD audio function (class 0x040300): a GPU's companion, never a device.
func Audio(bdf string, numa int) PCIFunc {
	return PCIFunc{BDF: bdf, Vendor: NvidiaVendor, Class: 0x040300, NUMA: numa, Device: 0x22ba}
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
	nextGroup    int
	groups       map[string]int    // BDF -> IOMMU group, as AddPCI made it
	under        map[string]string // BDF -> PCIFunc.Under
}

// NewKataTree creates the three directories under root (which must exist).
func NewKataTree(root string) (*KataTree, error) {
	t := &KataTree{
		Root:       root,
		DevicesDir: filepath.Join(root, "dev/vfio/devices"),
		ClassDir:   filepath.Join(root, "sys/class/vfio-dev"),
		PCIDir:     filepath.Join(root, "sys/devices/pci0000:00"),
		Major:      KataVFIOMajor,
		nextGroup:  100,
		groups:     map[string]int{},
		under:      map[string]string{},
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

// PCIPath is <root>/sys/devices/pci0000:00/[<under>/]<bdf> (or below the host bridge Under names).
func (t *KataTree) PCIPath(bdf string) string { return filepath.Join(t.Root, "sys/devices", t.pciRel(bdf)) }

// pciRel is bdf's path below /sys/devices: "pci0000:00/[<under>/]<bdf>", or "<under>/<bdf>" when
// Under starts with a host bridge or "platform/".
func (t *KataTree) pciRel(bdf string) string {
	if u := t.under[bdf]; strings.HasPrefix(u, "pci") || strings.HasPrefix(u, "platform/") {
		return filepath.Join(u, bdf)
	}
	return filepath.Join("pci0000:00", t.under[bdf], bdf)
}

// DeviceLink is the relative link target of vfioN/device for a PCI function at bdf (on the root bus).
func DeviceLink(bdf string) string { return "../../../devices/pci0000:00/" + bdf }

// AddPCI writes the PCI function's directory with vendor, device, class and numa_node in the
// kernel's formats.
func (t *KataTree) AddPCI(f PCIFunc) error {
	t.under[f.BDF] = f.Under
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
	g := f.Group
	if g == 0 {
		if old, ok := t.groups[f.BDF]; ok {
			g = old
		} else {
			g = t.nextGroup
			t.nextGroup++
		}
	}
	t.groups[f.BDF] = g
	return t.SetGroup(f.BDF, g, f.Driver)
}

// GroupsDir is <root>/sys/kernel/iommu_groups.
func (t *KataTree) GroupsDir() string { return filepath.Join(t.Root, "sys/kernel/iommu_groups") }

// GroupOf is the IOMMU group AddPCI put bdf in.
func (t *KataTree) GroupOf(bdf string) int { return t.groups[bdf] }

// relink makes link a symlink to target, replacing what was there.
func relink(target, link string) error {
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.Symlink(target, link)
}

// SetGroup makes bdf a member of IOMMU group g, as the kernel lays it out, bound to drv
// ("": vfio-pci, NoDriver: none):
//
//	<root>/sys/kernel/iommu_groups/<g>/devices/<BDF> -> ../../../../devices/pci0000:00/<BDF>
//	<root>/sys/devices/pci0000:00/<BDF>/iommu_group   -> ../../../kernel/iommu_groups/<g>
//	<root>/sys/devices/pci0000:00/<BDF>/driver        -> ../../../bus/pci/drivers/<drv>
//
// (with more ../ and the bridges in the path for a function below bridges).
func (t *KataTree) SetGroup(bdf string, g int, drv string) error {
	gdir := filepath.Join(t.GroupsDir(), fmt.Sprint(g), "devices")
	if err := os.MkdirAll(gdir, 0o755); err != nil {
		return err
	}
	if err := relink("../../../../devices/"+t.pciRel(bdf), filepath.Join(gdir, bdf)); err != nil {
		return err
	}
	up := strings.Repeat("../", strings.Count(t.pciRel(bdf), "/")+2) // from the function's directory to /sys
	if err := relink(fmt.Sprintf("%skernel/iommu_groups/%d", up, g), filepath.Join(t.PCIPath(bdf), "iommu_group")); err != nil {
		return err
	}
	t.groups[bdf] = g
	return t.Bind(bdf, drv)
}

// Bind points bdf's driver link at drv ("": vfio-pci, NoDriver: removes it), as a bind or unbind
// through sysfs does (no file event: the daemon learns it from the check or a uevent).
func (t *KataTree) Bind(bdf, drv string) error {
	link := filepath.Join(t.PCIPath(bdf), "driver")
	switch drv {
	case NoDriver:
		if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	case "":
		drv = "vfio-pci"
	}
	up := strings.Repeat("../", strings.Count(t.pciRel(bdf), "/")+2)
	return relink(up+"bus/pci/drivers/"+drv, link)
}

// Legacy VFIO: the group nodes /dev/vfio/<g> (character device LegacyMajor:g) with their class
// entries <root>/sys/class/vfio/<g>/dev, and the container node /dev/vfio/vfio (10:196).
const (
	LegacyMajor     = 238
	LegacyContainer = "/dev/vfio/vfio"
)

// GroupNodePath is <root>/dev/vfio/<g>.
func (t *KataTree) GroupNodePath(g int) string {
	return filepath.Join(t.Root, "dev/vfio", fmt.Sprint(g))
}

// AddGroupNode creates /dev/vfio/<g> and its class entry (and the container node if missing).
func (t *KataTree) AddGroupNode(g int) error {
	cls := filepath.Join(t.Root, "sys/class/vfio", fmt.Sprint(g))
	if err := os.MkdirAll(cls, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cls, "dev"), []byte(fmt.Sprintf("%d:%d\n", LegacyMajor, g)), 0o444); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(t.Root, LegacyContainer)); os.IsNotExist(err) {
		if err := Mknod(filepath.Join(t.Root, LegacyContainer), 10, 196); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(t.GroupNodePath(g)); err == nil {
		return nil
	}
	return Mknod(t.GroupNodePath(g), LegacyMajor, uint32(g))
}

// RemoveGroupNode deletes /dev/vfio/<g> (the kernel does when the group's last VFIO device goes).
func (t *KataTree) RemoveGroupNode(g int) error { return os.Remove(t.GroupNodePath(g)) }

// AddLegacy creates f's PCI directory in its group, and the group's node.
func (t *KataTree) AddLegacy(f PCIFunc) error {
	if err := t.AddPCI(f); err != nil {
		return err
	}
	return t.AddGroupNode(t.groups[f.BDF])
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
	dir, link := t.ClassEntry(n), "../../../devices/"+t.pciRel(bdf)
	if t.KernelLayout {
		dir = filepath.Join(t.PCIPath(bdf), "vfio-dev", VFIOName(n))
		link = "../../../" + bdf
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if t.KernelLayout {
		target := "../../devices/" + t.pciRel(bdf) + "/vfio-dev/" + VFIOName(n)
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
