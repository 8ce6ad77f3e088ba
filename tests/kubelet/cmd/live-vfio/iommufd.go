package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The cdev path of VFIO with IOMMUFD (Linux >= 6.6, CONFIG_IOMMUFD, CONFIG_VFIO_DEVICE_CDEV), as
// in the 6.12 source's include/uapi/linux/vfio.h and iommufd.h: all _IO(';', n).
const (
	vfioDeviceBindIOMMUFD     = 0x3b76 // VFIO_BASE + 18
	vfioDeviceAttachIOMMUFDPT = 0x3b77 // VFIO_BASE + 19
	iommuIOASAlloc            = 0x3b81 // IOMMUFD_CMD_IOAS_ALLOC

	iommuNode = "/dev/iommu"
	cdevDir   = "/dev/vfio/devices"
)

type bindIOMMUFD struct {
	argsz, flags uint32
	iommufd      int32
	outDevID     uint32
}

type attachPT struct{ argsz, flags, ptID uint32 }

type ioasAlloc struct{ size, flags, outIOASID uint32 }

// cdevOf is the VFIO cdev name of bdf ("vfio3"): the one entry of its vfio-dev directory.
func cdevOf(bdf string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(sysPCI, "devices", bdf, "vfio-dev"))
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("%s/vfio-dev holds %d entries", bdf, len(entries))
	}
	return entries[0].Name(), nil
}

// cdevPCI is the PCI address behind the cdev node path (/sys/class/vfio-dev/vfioN/device), after
// checking that the node is a character device with the device number sysfs gives it.
func cdevPCI(node string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil {
		return "", fmt.Errorf("stat %s: %v", node, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return "", fmt.Errorf("%s is not a character device", node)
	}
	name := filepath.Base(node)
	dev, err := os.ReadFile(filepath.Join("/sys/class/vfio-dev", name, "dev"))
	if err != nil {
		return "", err
	}
	want := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	if strings.TrimSpace(string(dev)) != want {
		return "", fmt.Errorf("%s is %s, sysfs says %s", node, want, strings.TrimSpace(string(dev)))
	}
	l, err := os.Readlink(filepath.Join("/sys/class/vfio-dev", name, "device"))
	if err != nil {
		return "", err
	}
	return filepath.Base(l), nil
}

// iommufdOpen is what a consumer of the cdev backend does with the nodes of one allocated ID (as
// QEMU with iommufd=, or Kata's runtime on the host side): open /dev/iommu (the plugin does not
// hand it out), allocate one IOAS, then for each cdev open it, bind it to the iommufd, attach it to
// the IOAS and ask for its info.
func iommufdOpen(cdevs []string) (string, error) {
	ifd, err := unix.Open(iommuNode, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %v", iommuNode, err)
	}
	defer unix.Close(ifd)
	ioas := ioasAlloc{size: uint32(unsafe.Sizeof(ioasAlloc{}))}
	if _, err := ioctl(ifd, iommuIOASAlloc, uintptr(unsafe.Pointer(&ioas))); err != nil {
		return "", fmt.Errorf("IOMMU_IOAS_ALLOC: %v", err)
	}
	var got []string
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, node := range cdevs {
		dfd, err := unix.Open(node, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("open %s: %v", node, err)
		}
		fds = append(fds, dfd)
		b := bindIOMMUFD{argsz: uint32(unsafe.Sizeof(bindIOMMUFD{})), iommufd: int32(ifd)}
		if _, err := ioctl(dfd, vfioDeviceBindIOMMUFD, uintptr(unsafe.Pointer(&b))); err != nil {
			return "", fmt.Errorf("VFIO_DEVICE_BIND_IOMMUFD %s: %v", node, err)
		}
		a := attachPT{argsz: uint32(unsafe.Sizeof(attachPT{})), ptID: ioas.outIOASID}
		if _, err := ioctl(dfd, vfioDeviceAttachIOMMUFDPT, uintptr(unsafe.Pointer(&a))); err != nil {
			return "", fmt.Errorf("VFIO_DEVICE_ATTACH_IOMMUFD_PT %s to IOAS %d: %v", node, ioas.outIOASID, err)
		}
		info := deviceInfo{argsz: 16}
		if _, err := ioctl(dfd, vfioDeviceGetInfo, uintptr(unsafe.Pointer(&info))); err != nil {
			return "", fmt.Errorf("VFIO_DEVICE_GET_INFO %s: %v", node, err)
		}
		if info.flags&vfioDeviceFlagsPCI == 0 {
			return "", fmt.Errorf("VFIO_DEVICE_GET_INFO %s: flags %#x lack VFIO_DEVICE_FLAGS_PCI", node, info.flags)
		}
		got = append(got, fmt.Sprintf("%s devid %d attached to hwpt %d (PCI, %d regions)",
			filepath.Base(node), b.outDevID, a.ptID, info.regions))
	}
	return fmt.Sprintf("%s IOAS %d; %s", iommuNode, ioas.outIOASID, strings.Join(got, ", ")), nil
}

// bindRefused opens the cdev and /dev/iommu and tries VFIO_DEVICE_BIND_IOMMUFD: the kernel's
// answer (nil: it bound) and where it answered ("open" or "bind").
func bindRefused(node string) (where string, kernel error, setup error) {
	ifd, err := unix.Open(iommuNode, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("open %s: %v", iommuNode, err)
	}
	defer unix.Close(ifd)
	dfd, err := unix.Open(node, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open", err, nil
	}
	defer unix.Close(dfd)
	b := bindIOMMUFD{argsz: uint32(unsafe.Sizeof(bindIOMMUFD{})), iommufd: int32(ifd)}
	_, err = ioctl(dfd, vfioDeviceBindIOMMUFD, uintptr(unsafe.Pointer(&b)))
	return "bind", err, nil
}

// errnoName is "EPERM (operation not permitted)" for an errno, else the error's text.
func errnoName(err error) string {
	if e, ok := err.(syscall.Errno); ok {
		return fmt.Sprintf("%s (%v)", unix.ErrnoName(e), err)
	}
	return fmt.Sprint(err)
}
