package kubelet

// The pod shape's read-only root (see podshape.go): the binary, the libraries its ELF headers
// name, the hypervisor shim, the hostPath volumes and /dev.

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ---- the root

func (p *Pod) mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %v", src, dst, fstype, err)
	}
	if flags&unix.MS_REMOUNT == 0 {
		p.mounts = append(p.mounts, dst)
	}
	return nil
}

// bind bind-mounts host (a file or a directory) at path in the root, read-only when ro.
func (p *Pod) bind(host, path string, ro bool) error {
	dst := filepath.Join(p.Root, path)
	fi, err := os.Stat(host)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else if _, serr := os.Stat(dst); serr != nil {
		err = os.WriteFile(dst, nil, 0o755)
	}
	if err != nil {
		return err
	}
	if err := p.mount(host, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if ro {
		return p.mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
	}
	return nil
}

func (p *Pod) buildRoot() error {
	s := &p.Spec
	if err := os.Mkdir(p.Root, 0o755); err != nil {
		return err
	}
	if err := p.mount("sdp-pod", p.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return err
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(p.Root, d), 0o755); err != nil {
			return err
		}
	}
	// /dev first: hostPath volumes may be mounted below it (/dev/vfio).
	dev := filepath.Join(p.Root, "dev")
	if err := p.mount("sdp-pod-dev", dev, "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return err
	}
	files := map[string]string{s.InPodBinary(): s.Binary}
	if err := ElfFiles(s.Binary, files); err != nil {
		return err
	}
	if s.Shim {
		files[PodShimPath] = s.ShimLib
		if err := ElfFiles(s.ShimLib, files); err != nil {
			return err
		}
	}
	for in, host := range files {
		if err := p.bind(host, in, true); err != nil {
			return err
		}
	}
	for _, b := range s.Binds {
		if err := p.bind(b.Host, b.Path, b.ReadOnly); err != nil {
			return err
		}
	}
	// The runtime's default nodes, then the injected devices.
	nodes := append([]PodDevNode{{"/dev/null", 1, 3}, {"/dev/zero", 1, 5}, {"/dev/full", 1, 7},
		{"/dev/random", 1, 8}, {"/dev/urandom", 1, 9}, {"/dev/tty", 5, 0}}, s.DevNodes...)
	for _, n := range nodes {
		if err := Mknod(filepath.Join(p.Root, n.Path), n.Major, n.Minor); err != nil {
			return err
		}
	}
	// readOnlyRootFilesystem: true
	return p.mount("", p.Root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

// ElfFiles adds to files (in-pod path -> host file) the program interpreter and every shared
// library path loads, found as its loader would find them (RUNPATH/RPATH, then the default
// directories), each at the path where it was found. musl's loader is its own libc.so.
func ElfFiles(path string, files map[string]string) error {
	return elfFiles(path, files, false)
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func elfFiles(path string, files map[string]string, musl bool) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return fmt.Errorf("%s: PT_INTERP: %v", path, err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		musl = musl || strings.Contains(interp, "ld-musl")
		if err := addFile(files, interp, interp); err != nil {
			return err
		}
	}
	if !musl {
		// A shared library of a musl program (the shim) names musl's libc.so too.
		if lib, _ := f.ImportedLibraries(); len(lib) > 0 {
			for _, l := range lib {
				if l == "libc.so" {
					musl = true
				}
			}
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(path)))
			}
		}
	}
	dirs = append(dirs, libDirs...)
	for _, name := range needed {
		if musl && strings.HasPrefix(name, "libc.so") {
			continue
		}
		found := ""
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				found = filepath.Join(d, name)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s needs %s: not found in %v", path, name, dirs)
		}
		if _, done := files[found]; done {
			continue
		}
		if err := addFile(files, found, found); err != nil {
			return err
		}
		if err := elfFiles(found, files, musl); err != nil {
			return err
		}
	}
	return nil
}

func addFile(files map[string]string, in, host string) error {
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return err
	}
	files[in] = real
	return nil
}

// Instrumented reports whether path is built with AddressSanitizer.
func Instrumented(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, get := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, _ := get()
		for _, s := range syms {
			if s.Name == "__asan_init" {
				return true
			}
		}
	}
	return false
}

// sanitizerEnv is this process's ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS (make asan) without
// log_path: the pod's root is read-only, so reports go to stderr, the pod's log.
func sanitizerEnv() []string {
	var env []string
	for _, k := range []string{"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"} {
		v, ok := os.LookupEnv(k)
		if !ok {
			continue
		}
		var keep []string
		for _, o := range strings.Split(v, ":") {
			if o != "" && !strings.HasPrefix(o, "log_path=") {
				keep = append(keep, o)
			}
		}
		env = append(env, k+"="+strings.Join(keep, ":"))
	}
	return env
}
