package kubelet

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStatus is the first number of the field name ("VmRSS", "VmHWM" in KiB, "PPid") of
// /proc/<pid>/status.
func ProcStatus(pid int, name string) (int, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name+":" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}
