package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	kvmGetAPIVersion = 0xAE00 // _IO(KVMIO, 0x00)
	kvmCreateVM      = 0xAE01 // _IO(KVMIO, 0x01)
)

// kvmSelfTest is the driver's own proof that the guest's KVM is real: open the device,
// KVM_GET_API_VERSION, KVM_CREATE_VM(kvmVMType), close both. It returns the thread ID that made the
// calls: the PID the kernel's KVM uevent reports is the creating task's, a thread of this Go
// program (not always the main one), so the goroutine stays on one thread throughout.
func kvmSelfTest(path string) (string, int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	msg, err := kvmCalls(path)
	return msg, tid, err
}

func kvmCalls(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %v", path, err)
	}
	defer unix.Close(fd)
	v, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmGetAPIVersion, 0)
	if e != 0 {
		return "", fmt.Errorf("KVM_GET_API_VERSION: %v", e)
	}
	if v != 12 {
		return "", fmt.Errorf("KVM_GET_API_VERSION = %d, want 12", v)
	}
	ipa, err := smallIPA(fd)
	if err != nil {
		return "", err
	}
	vm, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmCreateVM, uintptr(ipa))
	if e != 0 {
		return "", fmt.Errorf("KVM_CREATE_VM(%d): %v", ipa, e)
	}
	unix.Close(int(vm))
	if ipa != 0 {
		return fmt.Sprintf("KVM_GET_API_VERSION = 12, KVM_CREATE_VM(IPA %d bits) succeeded", ipa), nil
	}
	return "KVM_GET_API_VERSION = 12, KVM_CREATE_VM succeeded", nil
}

// smallIPA is KVM_CREATE_VM's argument on the device fd as the daemon's probe and sdp-kvm-run
// choose it (issue 30): on arm64 the host's IPA limit (KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE),
// KVM_VM_TYPE_ARM_IPA_SIZE of it) when that is below the default's 40 bits, which such a host
// refuses; else 0, the default.
func smallIPA(fd int) (int, error) {
	if runtime.GOARCH != "arm64" {
		return 0, nil
	}
	limit, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmCheckExtension, kvmCapARMVMIPASize)
	if e != 0 {
		return 0, fmt.Errorf("KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE): %v", e)
	}
	if limit > 0 && limit < kvmDefaultIPABits {
		return int(limit), nil
	}
	return 0, nil
}

// hostSmallIPA is smallIPA of path (0 when it cannot tell).
func hostSmallIPA(path string) int {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	ipa, _ := smallIPA(fd)
	return ipa
}

// charDev returns the device number of a character device node.
func charDev(path string) (major, minor uint32, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, 0, fmt.Errorf("%s is not a character device (mode %o)", path, st.Mode)
	}
	return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// command runs a short busybox command and returns its error with its output.
func command(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func moduleLoaded(name string) bool {
	b, err := os.ReadFile("/proc/modules")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return true
		}
	}
	return false
}

// fileState is what must not change about a file the daemon does not own.
type fileState struct {
	path     string
	data     []byte
	mode     os.FileMode
	uid, gid uint32
	ino      uint64
	mtime    syscall.Timespec
}

func statFile(path string) (fileState, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fileState{}, err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fileState{}, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fileState{}, err
	}
	return fileState{path: path, data: data, mode: fi.Mode(), uid: st.Uid, gid: st.Gid, ino: st.Ino, mtime: st.Mtim}, nil
}

func (a fileState) diff(b fileState) string {
	var d []string
	if !bytes.Equal(a.data, b.data) {
		d = append(d, "content")
	}
	if a.mode != b.mode {
		d = append(d, fmt.Sprintf("mode %v -> %v", a.mode, b.mode))
	}
	if a.uid != b.uid || a.gid != b.gid {
		d = append(d, fmt.Sprintf("owner %d:%d -> %d:%d", a.uid, a.gid, b.uid, b.gid))
	}
	if a.ino != b.ino {
		d = append(d, "inode (replaced)")
	}
	if a.mtime != b.mtime {
		d = append(d, "mtime")
	}
	return strings.Join(d, ", ")
}

func dirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// chownAll changes the owner of each path (not following symlinks).
func chownAll(uid, gid int, paths ...string) error {
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// writable reports whether the file system of dir accepts writes (EROFS otherwise).
func writable(dir string) error {
	return unix.Access(dir, unix.W_OK)
}

func bindMount(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %v", src, dst, err)
	}
	return nil
}

// remount makes the mount at dir read-only or read-write; only this mount, not its bind
// mounts elsewhere (MS_BIND: per-mount flags).
func remount(dir string, ro bool) error {
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
	if ro {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s (read-only %v): %v", dir, ro, err)
	}
	return nil
}
