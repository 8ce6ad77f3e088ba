package main

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's own record of KVM_CREATE_VM: since Linux 4.13 every VM created or destroyed
// sends a "change" uevent on the kvm misc device (virt/kvm/kvm_main.c,
// kvm_uevent_notify_change) with EVENT=create|destroy, CREATED=<VMs created since boot> and
// PID=<the creating process>. The driver listens on the uevent netlink socket, so it learns
// from the kernel, not from the daemon, that a probe's KVM_CREATE_VM ran and in which process.

const kvmDevPath = "/devices/virtual/misc/kvm"

// kvmEvent is one KVM uevent.
type kvmEvent struct {
	at      time.Time // when the driver received it
	event   string    // "create" or "destroy"
	pid     int
	created uint64
}

func (e kvmEvent) String() string {
	return fmt.Sprintf("EVENT=%s PID=%d CREATED=%d", e.event, e.pid, e.created)
}

// uevents collects the KVM uevents from the moment it is listening.
type uevents struct {
	fd   int
	mu   sync.Mutex
	list []kvmEvent
	err  error // the receive error that ended the reader, if any
}

func listenKVMUevents() (*uevents, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %v", err)
	}
	// Module loads and unloads send bursts: a large buffer so no KVM event is dropped.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind the uevent socket: %v", err)
	}
	u := &uevents{fd: fd}
	go u.read()
	return u, nil
}

func (u *uevents) read() {
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(u.fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			u.mu.Lock()
			u.err = err
			u.mu.Unlock()
			if err == unix.ENOBUFS {
				continue // reported by events(); the reader goes on
			}
			return
		}
		if e, ok := parseKVMUevent(buf[:n]); ok {
			u.mu.Lock()
			u.list = append(u.list, e)
			u.mu.Unlock()
		}
	}
}

// parseKVMUevent reads "ACTION@DEVPATH\0KEY=VALUE\0..." and keeps the kvm device's
// create/destroy events.
func parseKVMUevent(b []byte) (kvmEvent, bool) {
	e := kvmEvent{at: time.Now()}
	kvm := false
	for _, f := range bytes.Split(b, []byte{0}) {
		k, v, ok := bytes.Cut(f, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "DEVPATH":
			kvm = string(v) == kvmDevPath
		case "EVENT":
			e.event = string(v)
		case "PID":
			e.pid, _ = strconv.Atoi(string(v))
		case "CREATED":
			e.created, _ = strconv.ParseUint(string(v), 10, 64)
		}
	}
	return e, kvm && e.event != ""
}

// events returns the KVM events received so far and the reader's error, if any.
func (u *uevents) events() ([]kvmEvent, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]kvmEvent(nil), u.list...), u.err
}

// find returns the first event received at or after since for which match holds.
func (u *uevents) find(since time.Time, match func(kvmEvent) bool) (kvmEvent, bool) {
	list, _ := u.events()
	for _, e := range list {
		if !e.at.Before(since) && match(e) {
			return e, true
		}
	}
	return kvmEvent{}, false
}
