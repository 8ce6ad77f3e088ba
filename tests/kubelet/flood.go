package kubelet

// A flood of inotify events (issue 27, item 5): one node recreated in a tight loop, as a
// misbehaving udev rule or a crash-looping program does. The scenarios (flood_test.go) and
// make bench's flood figures (bench/flood.go) share it.

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Flood creates (mknod) and removes (unlink) one path in a loop on a goroutine of its own,
// locked to its thread, until Stop. Each mknod and each unlink is one change (one inotify
// event for a watch of the directory).
type Flood struct {
	path    string
	mode    uint32
	dev     int
	changes int64
	started time.Time
	stopped time.Time
	done    chan struct{}
	wg      sync.WaitGroup
	err     error
	once    sync.Once
}

// StartFlood starts recreating path: mode is the node's type and permissions for mknod
// (syscall.S_IFCHR|0o600 with dev for a device node, syscall.S_IFREG|0o600 for a file).
func StartFlood(path string, mode uint32, dev int) *Flood {
	f := &Flood{path: path, mode: mode, dev: dev, done: make(chan struct{}), started: time.Now()}
	f.wg.Add(1)
	go f.run()
	return f
}

func (f *Flood) run() {
	defer f.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-f.done:
			return
		default:
		}
		for i := 0; i < 256; i++ {
			if err := syscall.Mknod(f.path, f.mode, f.dev); err != nil {
				f.err = err
				return
			}
			if err := syscall.Unlink(f.path); err != nil {
				f.err = err
				return
			}
		}
		atomic.AddInt64(&f.changes, 512)
	}
}

// Changes is the number of changes made so far.
func (f *Flood) Changes() int64 { return atomic.LoadInt64(&f.changes) }

// Stop ends the flood (once) and waits for its goroutine; the node is gone afterwards. It
// returns the error that ended the flood early, if one did.
func (f *Flood) Stop() error {
	f.once.Do(func() {
		close(f.done)
		f.wg.Wait()
		f.stopped = time.Now()
	})
	return f.err
}

// Rate is the changes per second from the start to Stop (or to now while it runs).
func (f *Flood) Rate() float64 {
	end := f.stopped
	if end.IsZero() {
		end = time.Now()
	}
	return float64(f.Changes()) / end.Sub(f.started).Seconds()
}

// Running waits up to bound until the flood made at least n changes; false when it did not
// (or ended on an error: Stop returns it).
func (f *Flood) Running(n int64, bound time.Duration) bool {
	return Poll(bound, func() bool { return f.Changes() >= n })
}
