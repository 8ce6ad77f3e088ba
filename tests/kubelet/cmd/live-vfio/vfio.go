package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VFIO's legacy (container and group) ioctls, linux/vfio.h: _IO(VFIO_TYPE ';', VFIO_BASE 100 + n).
const (
	vfioGetAPIVersion     = 0x3b64
	vfioCheckExtension    = 0x3b65
	vfioSetIOMMU          = 0x3b66
	vfioGroupGetStatus    = 0x3b67
	vfioGroupSetContainer = 0x3b68
	vfioGroupGetDeviceFD  = 0x3b6a
	vfioDeviceGetInfo     = 0x3b6b

	vfioAPIVersion        = 0
	vfioType1IOMMU        = 1
	vfioGroupFlagsViable  = 1 << 0
	vfioGroupFlagsContSet = 1 << 1
	vfioDeviceFlagsPCI    = 1 << 1
	sysPCI                = "/sys/bus/pci"
	sysGroups             = "/sys/kernel/iommu_groups"
)

func ioctl(fd int, req, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return r, e
	}
	return r, nil
}

type groupStatus struct{ argsz, flags uint32 }

func groupFlags(fd int) (uint32, error) {
	s := groupStatus{argsz: 8}
	if _, err := ioctl(fd, vfioGroupGetStatus, uintptr(unsafe.Pointer(&s))); err != nil {
		return 0, fmt.Errorf("VFIO_GROUP_GET_STATUS: %v", err)
	}
	return s.flags, nil
}

type deviceInfo struct{ argsz, flags, regions, irqs uint32 }

// vfioOpen is what a container program does with the nodes of one allocated ID: open the
// container node, check the API, open the group node, check it is viable, join it to the
// container, set the type1 IOMMU and get a device fd for each BDF. It returns a summary.
func vfioOpen(container, group string, bdfs []string) (string, error) {
	cfd, err := unix.Open(container, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %v", container, err)
	}
	defer unix.Close(cfd)
	v, err := ioctl(cfd, vfioGetAPIVersion, 0)
	if err != nil || v != vfioAPIVersion {
		return "", fmt.Errorf("VFIO_GET_API_VERSION = %d (%v), want %d", v, err, vfioAPIVersion)
	}
	if ok, err := ioctl(cfd, vfioCheckExtension, vfioType1IOMMU); err != nil || ok != 1 {
		return "", fmt.Errorf("VFIO_CHECK_EXTENSION(VFIO_TYPE1_IOMMU) = %d (%v)", ok, err)
	}
	gfd, err := unix.Open(group, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %v", group, err)
	}
	defer unix.Close(gfd)
	flags, err := groupFlags(gfd)
	if err != nil {
		return "", err
	}
	if flags&vfioGroupFlagsViable == 0 {
		return "", fmt.Errorf("%s: VFIO_GROUP_GET_STATUS flags %#x: not viable", group, flags)
	}
	c := int32(cfd)
	if _, err := ioctl(gfd, vfioGroupSetContainer, uintptr(unsafe.Pointer(&c))); err != nil {
		return "", fmt.Errorf("VFIO_GROUP_SET_CONTAINER %s: %v", group, err)
	}
	if _, err := ioctl(cfd, vfioSetIOMMU, vfioType1IOMMU); err != nil {
		return "", fmt.Errorf("VFIO_SET_IOMMU(VFIO_TYPE1_IOMMU): %v", err)
	}
	var got []string
	for _, bdf := range bdfs {
		name, err := unix.BytePtrFromString(bdf)
		if err != nil {
			return "", err
		}
		dfd, err := ioctl(gfd, vfioGroupGetDeviceFD, uintptr(unsafe.Pointer(name)))
		if err != nil {
			return "", fmt.Errorf("VFIO_GROUP_GET_DEVICE_FD(%s) on %s: %v", bdf, group, err)
		}
		info := deviceInfo{argsz: 16}
		_, err = ioctl(int(dfd), vfioDeviceGetInfo, uintptr(unsafe.Pointer(&info)))
		unix.Close(int(dfd))
		if err != nil {
			return "", fmt.Errorf("VFIO_DEVICE_GET_INFO(%s): %v", bdf, err)
		}
		if info.flags&vfioDeviceFlagsPCI == 0 {
			return "", fmt.Errorf("VFIO_DEVICE_GET_INFO(%s): flags %#x lack VFIO_DEVICE_FLAGS_PCI", bdf, info.flags)
		}
		got = append(got, fmt.Sprintf("%s fd (PCI, %d regions)", bdf, info.regions))
	}
	return fmt.Sprintf("API %d, %s viable, container set, type1 IOMMU, %s", v, group, strings.Join(got, ", ")), nil
}

// groupRefused opens a group node and reports what the kernel says about it: its status flags
// and the error of VFIO_GROUP_SET_CONTAINER.
func groupRefused(container, group string) (uint32, error, error) {
	cfd, err := unix.Open(container, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(cfd)
	gfd, err := unix.Open(group, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(gfd)
	flags, err := groupFlags(gfd)
	if err != nil {
		return 0, nil, err
	}
	c := int32(cfd)
	_, setErr := ioctl(gfd, vfioGroupSetContainer, uintptr(unsafe.Pointer(&c)))
	return flags, setErr, nil
}

// sysfs helpers

func readAttr(bdf, name string) string {
	b, err := os.ReadFile(filepath.Join(sysPCI, "devices", bdf, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func driverOf(bdf string) string {
	l, err := os.Readlink(filepath.Join(sysPCI, "devices", bdf, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

func groupOf(bdf string) (int, error) {
	l, err := os.Readlink(filepath.Join(sysPCI, "devices", bdf, "iommu_group"))
	if err != nil {
		return -1, err
	}
	var g int
	_, err = fmt.Sscanf(filepath.Base(l), "%d", &g)
	return g, err
}

func groupMembers(g int) []string {
	entries, err := os.ReadDir(filepath.Join(sysGroups, fmt.Sprint(g), "devices"))
	if err != nil {
		return nil
	}
	var m []string
	for _, e := range entries {
		m = append(m, e.Name())
	}
	sort.Strings(m)
	return m
}

func writeSys(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o200); err != nil {
		return fmt.Errorf("write %q to %s: %v", value, path, err)
	}
	return nil
}

// bind binds bdf to drv: driver_override, unbind from the current driver, drivers_probe.
// An empty drv clears the override and probes (the device's own driver, if any, binds).
func bind(bdf, drv string) error {
	dev := filepath.Join(sysPCI, "devices", bdf)
	if cur := driverOf(bdf); cur != "" {
		if cur == drv {
			return nil
		}
		if err := writeSys(filepath.Join(dev, "driver", "unbind"), bdf); err != nil {
			return err
		}
	}
	override := drv
	if override == "" {
		override = "\n"
	}
	if err := writeSys(filepath.Join(dev, "driver_override"), override); err != nil {
		return err
	}
	if err := writeSys(filepath.Join(sysPCI, "drivers_probe"), bdf); err != nil {
		return err
	}
	if drv != "" && driverOf(bdf) != drv {
		return fmt.Errorf("%s: bound to %q after drivers_probe, want %s", bdf, driverOf(bdf), drv)
	}
	return nil
}

func unbind(bdf string) error {
	if driverOf(bdf) == "" {
		return nil
	}
	return writeSys(filepath.Join(sysPCI, "devices", bdf, "driver", "unbind"), bdf)
}
