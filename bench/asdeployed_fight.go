package main

// Two writers that disagree: two hyperlight main plugins (two releases on one node), each in
// its pod, with different DEVICE_UID, sharing the node's CDI directory (a tmpfs, as /var/run
// is) and kubelet directory. Each spec written is counted with inotify (IN_MOVED_TO: the
// daemons write a temporary file and rename it; IN_CLOSE_WRITE for a write in place) on the
// spec's name, over a window after a settle period: only the rate "once backed off" counts.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	k "sdp/kubelet"
)

// fightUIDs are the two writers' DEVICE_UID (the manifest's, and another release's).
var fightUIDs = [2]uint32{65534, 1000}

type fightResult struct {
	writes     [2]int // in the window, attributed by the spec's content read after each event
	unknown    int    // events whose file could not be read or attributed (already replaced)
	events     int    // every spec write in the window
	overflow   bool   // the inotify queue overflowed: the counts are lower bounds
	restarts   [2]int
	settle     time.Duration
	window     time.Duration
	err        string
	notRunning string
}

// perSecond is writer i's rate over the window.
func (f fightResult) perSecond(i int) float64 { return float64(f.writes[i]) / f.window.Seconds() }

func adFight(d adDaemon) fightResult {
	r := fightResult{settle: adFightSettle, window: adFightWindow}
	nd := newNode(daemonKind{name: d.name, resource: d.resource})
	defer nd.close()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		r.err = fmt.Sprintf("inotify: %v", err)
		return r
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, nd.n.CDIDir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		r.err = fmt.Sprintf("inotify on %s: %v", nd.n.CDIDir, err)
		return r
	}
	var pods []*k.Pod
	defer func() {
		for _, p := range pods {
			if err := closePod(p); err != nil {
				fmt.Fprintf(os.Stderr, "as deployed: pod %s: %v\n", p.Spec.Name, err)
			}
		}
	}()
	for i, uid := range fightUIDs {
		p, err := startPodOn(nd, d, fmt.Sprintf("hl-writer%d", i), fmt.Sprintf("DEVICE_UID=%d", uid))
		if err != nil {
			r.err = err.Error()
			return r
		}
		pods = append(pods, p)
		if err := p.WaitExec(p.Current(), adStartBound); err != nil {
			r.err = err.Error()
			return r
		}
	}
	spec := filepath.Join(nd.n.CDIDir, k.HyperlightCDIFile)
	from := time.Now().Add(r.settle)
	until := from.Add(r.window)
	buf := make([]byte, 64<<10)
	for time.Now().Before(until) {
		wait := int(time.Until(until)/time.Millisecond) + 1
		if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, wait); err != nil && err != unix.EINTR {
			r.err = fmt.Sprintf("poll: %v", err)
			return r
		}
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			continue
		}
		counting := !time.Now().Before(from)
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.LittleEndian.Uint32(buf[off+4:])
			nameLen := int(binary.LittleEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen], "\x00"))
			off += unix.SizeofInotifyEvent + nameLen
			if mask&unix.IN_Q_OVERFLOW != 0 && counting {
				r.overflow = true
			}
			if name != k.HyperlightCDIFile || !counting {
				continue
			}
			r.events++
			if w := specWriter(spec); w >= 0 {
				r.writes[w]++
			} else {
				r.unknown++
			}
		}
	}
	for i, p := range pods {
		r.restarts[i] = p.Restarts()
		if c := p.Current(); c.Exited() {
			r.notRunning += fmt.Sprintf(" writer %d: %s;", i, c.ExitDescription())
		}
	}
	return r
}

// specWriter is the index in fightUIDs of the writer whose spec the file holds, or -1.
func specWriter(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	s, err := k.ParseCDI(b)
	if err != nil {
		return -1
	}
	for _, dev := range s.Devices {
		for _, n := range dev.ContainerEdits.DeviceNodes {
			if n.UID == nil {
				continue
			}
			for i, uid := range fightUIDs {
				if *n.UID == uid {
					return i
				}
			}
		}
	}
	return -1
}
