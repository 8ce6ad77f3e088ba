package kubelet

// The pod shape's memory cgroup (see podshape.go): cgroup v1's memory controller, or cgroup v2
// where memory is delegated; limit, OOM kills, peak and usage.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ---- cgroup

type podCgroup struct {
	dir string // the cgroup's directory
	rel string // its path in the hierarchy (as /proc/<pid>/cgroup shows it)
	v2  bool
}

// newPodCgroup makes a child of this process's memory cgroup with limit bytes: cgroup v1's
// memory controller when mounted, else cgroup v2 when memory is enabled for children.
func newPodCgroup(name string, limit int64) (*podCgroup, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("pod %s: no memory limit", name)
	}
	mount, rel, v2, err := memoryCgroup()
	if err != nil {
		return nil, err
	}
	leaf := fmt.Sprintf("sdp-pod-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e9)
	c := &podCgroup{dir: filepath.Join(mount, rel, leaf), rel: filepath.Join(rel, leaf), v2: v2}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %v", err)
	}
	files := [][2]string{{"memory.limit_in_bytes", strconv.FormatInt(limit, 10)}}
	if v2 {
		files = [][2]string{{"memory.max", strconv.FormatInt(limit, 10)}, {"memory.swap.max", "0"}}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(c.dir, f[0]), []byte(f[1]), 0); err != nil {
			if v2 && f[0] == "memory.swap.max" && os.IsNotExist(err) {
				continue // no swap accounting: no swap
			}
			os.Remove(c.dir)
			return nil, fmt.Errorf("memory cgroup %s: %s: %v (cgroup v2: is memory in the parent's cgroup.subtree_control?)",
				c.dir, f[0], err)
		}
	}
	return c, nil
}

// memoryCgroup finds the memory hierarchy's mount point and this process's path in it.
func memoryCgroup() (mount, rel string, v2 bool, err error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", false, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false, err
	}
	find := func(match func(fstype, opts string) bool) (string, string) {
		for _, l := range strings.Split(string(mi), "\n") {
			i := strings.Index(l, " - ")
			if i < 0 {
				continue
			}
			f, post := strings.Fields(l[:i]), strings.Fields(l[i+3:])
			if len(f) > 4 && len(post) > 2 && match(post[0], ","+post[2]+",") {
				return f[4], f[3]
			}
		}
		return "", ""
	}
	for _, l := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 || !strings.Contains(","+parts[1]+",", ",memory,") {
			continue
		}
		mp, root := find(func(fs, opts string) bool { return fs == "cgroup" && strings.Contains(opts, ",memory,") })
		if mp != "" {
			return mp, strings.TrimPrefix(parts[2], strings.TrimSuffix(root, "/")), false, nil
		}
	}
	for _, l := range strings.Split(string(own), "\n") {
		if strings.HasPrefix(l, "0::") {
			mp, root := find(func(fs, _ string) bool { return fs == "cgroup2" })
			if mp == "" {
				break
			}
			rel := strings.TrimPrefix(l[3:], strings.TrimSuffix(root, "/"))
			ctl, _ := os.ReadFile(filepath.Join(mp, rel, "cgroup.controllers"))
			if strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
				return mp, rel, true, nil
			}
		}
	}
	return "", "", false, errors.New("no memory cgroup: neither cgroup v1's memory controller nor cgroup v2 with memory")
}

func (c *podCgroup) procs() string { return filepath.Join(c.dir, "cgroup.procs") }

func (c *podCgroup) readInt(file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// key reads "key N" from a flat-keyed file (memory.oom_control, memory.events).
func (c *podCgroup) key(file, key string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s/%s has no %s (kernel too old to count OOM kills?)", c.dir, file, key)
}

func (c *podCgroup) oomKills() (int64, error) {
	if c.v2 {
		return c.key("memory.events", "oom_kill")
	}
	return c.key("memory.oom_control", "oom_kill")
}

func (c *podCgroup) peak() (int64, error) {
	if c.v2 {
		return c.readInt("memory.peak")
	}
	return c.readInt("memory.max_usage_in_bytes")
}

func (c *podCgroup) usage() (int64, error) {
	if c.v2 {
		return c.readInt("memory.current")
	}
	return c.readInt("memory.usage_in_bytes")
}

// remove waits (bounded) until no process is left in the cgroup, then removes it.
func (c *podCgroup) remove() error {
	var err error
	if !Poll(10*time.Second, func() bool {
		b, rerr := os.ReadFile(c.procs())
		if rerr != nil {
			err = rerr
			return true
		}
		if len(bytes.TrimSpace(b)) != 0 {
			err = fmt.Errorf("processes left in %s: %s", c.dir, bytes.Fields(b))
			return false
		}
		err = os.Remove(c.dir)
		return err == nil
	}) {
		return err
	}
	return err
}
