/*
 * tiny.c: a bare-metal guest small enough to run on any KVM, including a PVM host's, whose
 * instruction emulator stops a stock Linux kernel (README.md). QEMU boots it with
 * `-kernel tiny.elf` through its PVH note; it drives a legacy virtio-net device on the pod's
 * tap by polling and exchanges packets with the pod:
 *
 *   1. finds the virtio-net PCI device (1af4:1000, legacy I/O BAR: disable-modern=on) and
 *      sets it up: feature VIRTIO_NET_F_MAC only, RX queue 0 with buffers posted, TX queue 1;
 *   2. is 10.77.0.2/24: resolves the pod (10.77.0.1) by ARP and pings it (every 500 ms, for
 *      30 s at most), prints `MICROVM: ping 10.77.0.1 ok (...)` or `MICROVM: FAIL <why>`;
 *   3. answers ARP and ICMP echo requests (the pod's ping), for 60 s at most, until the pod
 *      says it is done: the same `echo done ... | nc 10.77.0.2 7777` as for the Linux guest,
 *      for which it speaks just enough TCP (SYN-ACK, then ACK+FIN after the first data);
 *   4. prints `MICROVM: pod said: <its line>` and ends QEMU through isa-debug-exit.
 *
 * The serial console is COM1; only the result lines start with `MICROVM: ` (run-in-pod.sh
 * takes the first such line as the guest's result), progress lines with `tiny: `.
 * QEMU's exit status (isa-debug-exit: (value << 1) | 1) is 33 at the clean end, 35 after a
 * FAIL. Plain integer instructions and port I/O only, no interrupts: everything polls.
 */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

#define barrier() asm volatile("" ::: "memory")

/* ---- entry ---- */

/*
 * QEMU's -kernel finds this note (type XEN_ELFNOTE_PHYS32_ENTRY = 18, owner "Xen") in a
 * PT_NOTE segment; its pvh.bin option ROM then jumps to the address in it: 32-bit protected
 * mode, flat segments, paging off, %ebx = the hvm_start_info QEMU built.
 */
extern char _start[];
__attribute__((section(".note.pvh"), used, aligned(4))) static const struct {
	u32 namesz, descsz, type;
	char name[4];
	u32 entry;
} pvh_note = { 4, 4, 18, "Xen", (u32)_start };

#define STACK_SIZE 16384
#define STR(x) #x
#define XSTR(x) STR(x)
__attribute__((used, aligned(16))) u8 stack[STACK_SIZE];

/* no IDT: interrupts stay off; our own stack; tiny_main(hvm_start_info) never returns */
asm(".section .text.start, \"ax\"\n"
    ".globl _start\n"
    "_start:\n"
    "	cli\n"
    "	mov $stack + " XSTR(STACK_SIZE) ", %esp\n"
    "	push %ebx\n"
    "	call tiny_main\n");

#define HVM_START_MAGIC 0x336ec578

/* ---- port I/O ---- */

static inline void outb(u16 port, u8 v) { asm volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outw(u16 port, u16 v) { asm volatile("outw %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outl(u16 port, u32 v) { asm volatile("outl %0, %1" : : "a"(v), "Nd"(port)); }
static inline u8 inb(u16 port)
{
	u8 v;
	asm volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}
static inline u16 inw(u16 port)
{
	u16 v;
	asm volatile("inw %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}
static inline u32 inl(u16 port)
{
	u32 v;
	asm volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

/* ---- the end: -device isa-debug-exit,iobase=0xf4,iosize=4 makes QEMU exit((v << 1) | 1) ---- */

#define DEBUG_EXIT 0xf4
#define EXIT_OK 0x10   /* QEMU's exit status 33 */
#define EXIT_FAIL 0x11 /* 35 */

static void __attribute__((noreturn)) quit(u8 v)
{
	outb(DEBUG_EXIT, v);
	for (;;) /* no isa-debug-exit device: stop here */
		asm volatile("hlt");
}

/* ---- serial console: COM1, as SeaBIOS left it (QEMU ignores the line settings) ---- */

#define COM1 0x3f8

static void putch(char c)
{
	while (!(inb(COM1 + 5) & 0x20)) /* line status: transmitter holding register empty */
		;
	outb(COM1, c);
}
static void print(const char *s)
{
	while (*s)
		putch(*s++);
}
static void printu(u32 v)
{
	char d[10];
	int n = 0;
	do
		d[n++] = '0' + v % 10;
	while (v /= 10);
	while (n)
		putch(d[--n]);
}
static void printx(u32 v, int digits)
{
	while (digits--)
		putch("0123456789abcdef"[v >> (4 * digits) & 15]);
}
static void printip(const u8 *ip)
{
	for (int i = 0; i < 4; i++) {
		printu(ip[i]);
		if (i < 3)
			putch('.');
	}
}
static void printmac(const u8 *mac)
{
	for (int i = 0; i < 6; i++) {
		printx(mac[i], 2);
		if (i < 5)
			putch(':');
	}
}
static void __attribute__((noreturn)) fail(const char *why)
{
	print("MICROVM: FAIL ");
	print(why);
	putch('\n');
	quit(EXIT_FAIL);
}

/* ---- time: the PIT (i8254), channel 0 ---- */

/*
 * Channel 0 counts down at 1.193182 MHz from 65536, over and over (mode 2). now() adds what it
 * counted since the previous call, so it must be called at least every 55 ms: the loops below
 * call it on every turn (a missed wrap would only make a deadline later, never earlier).
 */
#define PIT_HZ 1193182
#define MS(n) ((u32)(n) * (PIT_HZ / 1000))
static u32 ticks;
static u16 pit_last;

static void pit_init(void)
{
	outb(0x43, 0x34); /* channel 0, low then high byte, mode 2, binary */
	outb(0x40, 0);
	outb(0x40, 0); /* reload value 0 = 65536 */
}
static u32 now(void)
{
	u16 c;

	outb(0x43, 0x00); /* latch channel 0's count */
	c = inb(0x40);
	c |= inb(0x40) << 8;
	ticks += (u16)(pit_last - c);
	pit_last = c;
	return ticks;
}

/* ---- PCI configuration space (mechanism 1: ports 0xcf8/0xcfc), bus 0 ---- */

static u32 pci_read(u32 dev, u32 reg)
{
	outl(0xcf8, 0x80000000 | dev << 11 | reg);
	return inl(0xcfc);
}
static void pci_write(u32 dev, u32 reg, u32 v)
{
	outl(0xcf8, 0x80000000 | dev << 11 | reg);
	outl(0xcfc, v);
}

/* ---- legacy virtio over PCI: the registers in I/O BAR 0 (virtio 0.9.5, no MSI-X) ---- */

#define VIRTIO_HOST_FEATURES 0x00
#define VIRTIO_GUEST_FEATURES 0x04
#define VIRTIO_QUEUE_PFN 0x08
#define VIRTIO_QUEUE_SIZE 0x0c
#define VIRTIO_QUEUE_SEL 0x0e
#define VIRTIO_QUEUE_NOTIFY 0x10
#define VIRTIO_STATUS 0x12
#define VIRTIO_NET_CONFIG_MAC 0x14 /* the device's config follows; virtio-net's starts with the MAC */

#define STATUS_ACK 1
#define STATUS_DRIVER 2
#define STATUS_DRIVER_OK 4
#define VIRTIO_NET_F_MAC (1u << 5)

/* a split virtqueue: descriptors, the driver's avail ring, the device's used ring */
struct desc {
	u32 addr, addr_high, len;
	u16 flags, next;
};
#define DESC_NEXT 1
#define DESC_WRITE 2 /* the device writes this buffer */
struct used {
	u16 flags, idx;
	struct {
		u32 id, len;
	} ring[];
};
struct vq {
	u16 index, size;
	volatile struct desc *desc;
	volatile u16 *avail; /* flags, idx, ring[size] */
	volatile struct used *used;
	u16 avail_idx, used_seen;
};

/*
 * Legacy layout for a queue of size n: n descriptors (16 bytes), the avail ring right after,
 * the used ring at the next 4096 boundary; the whole at a 4096-aligned address given to the
 * device as a page number. QEMU's virtio-net queues have 256 entries.
 */
#define QUEUE_MAX 256
#define ALIGN4K(x) (((x) + 4095) & ~4095u)
#define RING_BYTES (ALIGN4K(16 * QUEUE_MAX + 6 + 2 * QUEUE_MAX) + ALIGN4K(6 + 8 * QUEUE_MAX))
__attribute__((aligned(4096))) static u8 rings[2][RING_BYTES];

/* every packet: the legacy virtio-net header (10 bytes without MRG_RXBUF) in a descriptor of its
 * own (no VIRTIO_F_ANY_LAYOUT), the Ethernet frame in the next */
#define NET_HDR 10
#define FRAME_MAX 1536
#define RX_BUFS 16
static u8 rx_hdr[RX_BUFS][NET_HDR], rx_frame[RX_BUFS][FRAME_MAX];
static u8 tx_hdr[NET_HDR], tx_frame[FRAME_MAX]; /* the header stays zero: no offloads */

static u16 io; /* BAR 0 */
static struct vq rxq, txq;
static u8 mac[6];

static void vq_setup(struct vq *q, u16 index, u16 min)
{
	u8 *mem = rings[index];

	outw(io + VIRTIO_QUEUE_SEL, index);
	q->index = index;
	q->size = inw(io + VIRTIO_QUEUE_SIZE);
	if (q->size < min || q->size > QUEUE_MAX)
		fail("virtio-net: a queue size outside what this guest handles");
	q->desc = (volatile struct desc *)mem;
	q->avail = (volatile u16 *)(mem + 16 * q->size);
	q->used = (volatile struct used *)(mem + ALIGN4K(16 * q->size + 6 + 2 * q->size));
	q->avail[0] = 1; /* VRING_AVAIL_F_NO_INTERRUPT: we poll */
	outl(io + VIRTIO_QUEUE_PFN, (u32)mem >> 12);
}
static void vq_desc(struct vq *q, u16 i, void *buf, u32 len, u16 flags, u16 next)
{
	q->desc[i].addr = (u32)buf;
	q->desc[i].addr_high = 0;
	q->desc[i].len = len;
	q->desc[i].flags = flags;
	q->desc[i].next = next;
}
static void vq_add(struct vq *q, u16 head)
{
	q->avail[2 + q->avail_idx % q->size] = head;
	barrier(); /* the entry before the index that publishes it (x86 keeps stores in order) */
	q->avail[1] = ++q->avail_idx;
}
static void vq_kick(struct vq *q)
{
	barrier();
	outw(io + VIRTIO_QUEUE_NOTIFY, q->index);
}
/* the head of the next chain the device is done with (and its written length), or -1 */
static int vq_get(struct vq *q, u32 *len)
{
	int id;

	if (q->used->idx == q->used_seen)
		return -1;
	barrier();
	id = q->used->ring[q->used_seen % q->size].id;
	*len = q->used->ring[q->used_seen % q->size].len;
	q->used_seen++;
	return id;
}

static void virtio_net_init(void)
{
	u32 dev, bar;

	for (dev = 0; dev < 32; dev++)
		if (pci_read(dev, 0) == 0x10001af4) /* device 0x1000, vendor 0x1af4 */
			break;
	if (dev == 32)
		fail("no virtio-net PCI device (1af4:1000) on bus 0");
	bar = pci_read(dev, 0x10);
	if (!(bar & 1) || bar == 1)
		fail("virtio-net: BAR 0 is not an assigned I/O BAR (disable-modern=on?)");
	io = bar & ~3u;
	pci_write(dev, 0x04, (pci_read(dev, 0x04) & 0xffff) | 0x5); /* command: I/O space, bus master */

	outb(io + VIRTIO_STATUS, 0); /* reset */
	outb(io + VIRTIO_STATUS, STATUS_ACK);
	outb(io + VIRTIO_STATUS, STATUS_ACK | STATUS_DRIVER);
	if (!(inl(io + VIRTIO_HOST_FEATURES) & VIRTIO_NET_F_MAC))
		fail("virtio-net: the device offers no MAC (VIRTIO_NET_F_MAC)");
	outl(io + VIRTIO_GUEST_FEATURES, VIRTIO_NET_F_MAC);
	for (int i = 0; i < 6; i++)
		mac[i] = inb(io + VIRTIO_NET_CONFIG_MAC + i);

	/* RX: RX_BUFS chains header + frame, all posted; TX: one chain, descriptors 0 and 1 */
	vq_setup(&rxq, 0, 2 * RX_BUFS);
	for (u16 i = 0; i < RX_BUFS; i++) {
		vq_desc(&rxq, 2 * i, rx_hdr[i], NET_HDR, DESC_WRITE | DESC_NEXT, 2 * i + 1);
		vq_desc(&rxq, 2 * i + 1, rx_frame[i], FRAME_MAX, DESC_WRITE, 0);
		vq_add(&rxq, 2 * i);
	}
	vq_setup(&txq, 1, 2);
	vq_desc(&txq, 0, tx_hdr, NET_HDR, DESC_NEXT, 1);
	vq_desc(&txq, 1, tx_frame, 0, 0, 0);
	outb(io + VIRTIO_STATUS, STATUS_ACK | STATUS_DRIVER | STATUS_DRIVER_OK);
	vq_kick(&rxq); /* the device may have dropped frames while it had no buffers */

	print("tiny: virtio-net at 00:");
	printx(dev, 2);
	print(".0 io 0x");
	printx(io, 4);
	print(" mac ");
	printmac(mac);
	print(" queues rx ");
	printu(rxq.size);
	print(" tx ");
	printu(txq.size);
	putch('\n');
}

/* sends tx_frame's first len bytes and waits until the device has taken them */
static void send(u32 len)
{
	u32 t = now(), n;

	txq.desc[1].len = len;
	vq_add(&txq, 0);
	vq_kick(&txq);
	while (vq_get(&txq, &n) < 0)
		if (now() - t > MS(1000))
			fail("virtio-net: the device did not take a frame in 1 s");
}

/* ---- the network: Ethernet, ARP, IPv4, ICMP echo, the least of TCP ---- */

static const u8 my_ip[4] = { 10, 77, 0, 2 }, pod_ip[4] = { 10, 77, 0, 1 };
static const u8 broadcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, zero_mac[6];
static u8 pod_mac[6];
static int pod_mac_known;
static u16 ip_id;

#define ETH_ARP 0x0806
#define ETH_IP 0x0800
#define IP_ICMP 1
#define IP_TCP 6
#define PING_ID 0x7777
#define PING_DATA 32
#define DONE_PORT 7777
#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_ACK 0x10
#define TCP_ISN 0x77000000 /* our sequence number: one connection, no randomness needed */

/* the pod's echo reply: its sequence number and round trip (PIT ticks); seq 0 is none yet */
static u16 reply_seq;
static u32 reply_rtt;

static u16 get16(const u8 *p) { return p[0] << 8 | p[1]; }
static u32 get32(const u8 *p) { return (u32)get16(p) << 16 | get16(p + 2); }
static void put16(u8 *p, u32 v)
{
	p[0] = v >> 8;
	p[1] = v;
}
static void put32(u8 *p, u32 v)
{
	put16(p, v >> 16);
	put16(p + 2, v);
}
static void copy(u8 *d, const u8 *s, u32 n)
{
	while (n--)
		*d++ = *s++;
}
static int same(const u8 *a, const u8 *b, u32 n)
{
	while (n--)
		if (*a++ != *b++)
			return 0;
	return 1;
}

/* the Internet checksum: the one's complement of the one's complement sum of 16-bit words;
 * sum() adds to a running sum (for TCP's pseudo header), csum() folds and complements */
static u32 sum(const u8 *p, u32 n, u32 s)
{
	for (; n > 1; p += 2, n -= 2)
		s += get16(p);
	if (n)
		s += p[0] << 8;
	return s;
}
static u16 csum(const u8 *p, u32 n, u32 s)
{
	s = sum(p, n, s);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return ~s;
}

/* the Ethernet header in tx_frame; returns where its payload goes */
static u8 *eth_start(const u8 *dst, u16 type)
{
	copy(tx_frame, dst, 6);
	copy(tx_frame + 6, mac, 6);
	put16(tx_frame + 12, type);
	return tx_frame + 14;
}
/* Ethernet + IPv4 header (20 bytes, DF, TTL 64) for len bytes of payload; returns the payload */
static u8 *ip_start(const u8 *dst_mac, const u8 *dst_ip, u8 proto, u32 len)
{
	u8 *h = eth_start(dst_mac, ETH_IP);

	h[0] = 0x45; /* version 4, header 5 words */
	h[1] = 0;
	put16(h + 2, 20 + len);
	put16(h + 4, ip_id++);
	put16(h + 6, 0x4000);
	h[8] = 64;
	h[9] = proto;
	put16(h + 10, 0);
	copy(h + 12, my_ip, 4);
	copy(h + 16, dst_ip, 4);
	put16(h + 10, csum(h, 20, 0));
	return h + 20;
}

static void arp_send(u16 op, const u8 *eth_dst, const u8 *target_mac, const u8 *target_ip)
{
	u8 *a = eth_start(eth_dst, ETH_ARP);

	put16(a, 1);          /* hardware: Ethernet */
	put16(a + 2, ETH_IP); /* protocol: IPv4 */
	a[4] = 6;
	a[5] = 4;
	put16(a + 6, op); /* 1 request, 2 reply */
	copy(a + 8, mac, 6);
	copy(a + 14, my_ip, 4);
	copy(a + 18, target_mac, 6);
	copy(a + 24, target_ip, 4);
	send(14 + 28);
}

static void ping_send(u16 seq)
{
	u8 *m = ip_start(pod_mac, pod_ip, IP_ICMP, 8 + PING_DATA);

	m[0] = 8; /* echo request */
	m[1] = 0;
	put16(m + 2, 0);
	put16(m + 4, PING_ID);
	put16(m + 6, seq);
	put32(m + 8, now()); /* the pod echoes it back: the round trip */
	for (int i = 4; i < PING_DATA; i++)
		m[8 + i] = 'a' + i;
	put16(m + 2, csum(m, 8 + PING_DATA, 0));
	send(14 + 20 + 8 + PING_DATA);
}

static void arp_in(const u8 *a)
{
	if (get16(a) != 1 || get16(a + 2) != ETH_IP)
		return;
	if (same(a + 14, pod_ip, 4)) { /* the pod's request or its reply to ours */
		copy(pod_mac, a + 8, 6);
		pod_mac_known = 1;
	}
	if (get16(a + 6) == 1 && same(a + 24, my_ip, 4))
		arp_send(2, a + 8, a + 8, a + 14);
}

static void icmp_in(const u8 *src_mac, const u8 *src_ip, const u8 *m, u32 n)
{
	if (m[0] == 8) { /* echo request: the same message back as a reply */
		u8 *r = ip_start(src_mac, src_ip, IP_ICMP, n);

		copy(r, m, n);
		r[0] = 0;
		put16(r + 2, 0);
		put16(r + 2, csum(r, n, 0));
		send(14 + 20 + n);
	} else if (m[0] == 0 && same(src_ip, pod_ip, 4) && get16(m + 4) == PING_ID &&
		   n >= 8 + PING_DATA) {
		reply_seq = get16(m + 6);
		reply_rtt = now() - get32(m + 8);
	}
}

static void tcp_send(const u8 *dst_mac, const u8 *dst_ip, u16 dst_port, u8 flags, u32 seq, u32 ack)
{
	u8 *t = ip_start(dst_mac, dst_ip, IP_TCP, 20);
	u32 s;

	put16(t, DONE_PORT);
	put16(t + 2, dst_port);
	put32(t + 4, seq);
	put32(t + 8, ack);
	t[12] = 5 << 4; /* header: 5 words, no options */
	t[13] = flags;
	put16(t + 14, FRAME_MAX); /* window */
	put32(t + 16, 0);         /* checksum, urgent pointer */
	/* the pseudo header: addresses, protocol, TCP length */
	s = sum(my_ip, 4, 0);
	s = sum(dst_ip, 4, s);
	s += IP_TCP + 20;
	put16(t + 16, csum(t, 20, s));
	send(14 + 20 + 20);
}

/* TCP to port 7777: a SYN gets a SYN-ACK; the first data is the pod's line: printed, acknowledged
 * with our FIN (nc ends on it), and the guest's end */
static void tcp_in(const u8 *src_mac, const u8 *src_ip, const u8 *t, u32 n)
{
	u32 off = (t[12] >> 4) * 4, seq = get32(t + 4);

	if (get16(t + 2) != DONE_PORT || off < 20 || off > n)
		return;
	if (t[13] & TCP_SYN) {
		tcp_send(src_mac, src_ip, get16(t), TCP_SYN | TCP_ACK, TCP_ISN, seq + 1);
	} else if ((t[13] & TCP_ACK) && n > off) {
		print("MICROVM: pod said: ");
		for (u32 i = off; i < n && t[i] != '\n'; i++)
			putch(t[i] >= ' ' && t[i] < 127 ? t[i] : '?');
		putch('\n');
		tcp_send(src_mac, src_ip, get16(t), TCP_FIN | TCP_ACK, TCP_ISN + 1,
			 seq + (n - off) + (t[13] & TCP_FIN));
		quit(EXIT_OK);
	}
}

static void ip_in(const u8 *f, u32 len)
{
	const u8 *h = f + 14;
	u32 hl = (h[0] & 15) * 4, total = get16(h + 2);

	if (h[0] >> 4 != 4 || hl < 20 || total < hl || total > len || !same(h + 16, my_ip, 4))
		return;
	if (get16(h + 6) & 0x3fff) /* a fragment: nothing here sends big enough datagrams */
		return;
	if (h[9] == IP_ICMP && total - hl >= 8)
		icmp_in(f + 6, h + 12, h + hl, total - hl);
	else if (h[9] == IP_TCP && total - hl >= 20)
		tcp_in(f + 6, h + 12, h + hl, total - hl);
}

/* every frame received so far, each buffer posted again; and the clock */
static void poll(void)
{
	int id;
	u32 len;

	while ((id = vq_get(&rxq, &len)) >= 0) {
		u8 *f = rx_frame[id / 2];

		if (len >= NET_HDR + 14) {
			len -= NET_HDR;
			if (get16(f + 12) == ETH_ARP && len >= 14 + 28)
				arp_in(f + 14);
			else if (get16(f + 12) == ETH_IP && len >= 14 + 20)
				ip_in(f, len);
		}
		vq_add(&rxq, id);
		vq_kick(&rxq);
	}
	now();
}

/* the hypervisor's CPUID signature (leaf 0x40000000): "KVMKVMKVM" on KVM, "TCGTCGTCGTCG" on TCG */
static void print_hypervisor(void)
{
	u32 r[4];
	const char *c = (const char *)r;
	int i;

	asm volatile("cpuid" : "=a"(r[3]), "=b"(r[0]), "=c"(r[1]), "=d"(r[2]) : "a"(0x40000000), "c"(0));
	for (i = 0; i < 12 && c[i] >= ' ' && c[i] < 127; i++)
		putch(c[i]);
	if (i == 0)
		print("none");
}

void __attribute__((noreturn, used)) tiny_main(const u32 *start_info)
{
	u32 t0, t, next, arps = 0;
	u16 seq = 0;

	pit_init();
	print("tiny: PVH entry, hvm_start_info at 0x");
	printx((u32)start_info, 8);
	print(", cpuid hypervisor ");
	print_hypervisor();
	putch('\n');
	if (start_info[0] != HVM_START_MAGIC)
		fail("no hvm_start_info at %ebx: not entered by PVH");
	virtio_net_init();

	/* the pod's MAC, then its echo reply: an ARP request every 500 ms until the MAC is known,
	 * the first echo request at once, then one every 500 ms; 30 s at most */
	t0 = next = now();
	while (!reply_seq) {
		poll();
		t = now();
		if (t - t0 > MS(30000))
			fail(pod_mac_known ? "ping 10.77.0.1: no reply in 30 s" :
					     "ping 10.77.0.1: no ARP reply in 30 s");
		if ((int)(t - next) >= 0 || (pod_mac_known && !seq)) {
			next = t + MS(500);
			if (!pod_mac_known) {
				arp_send(1, broadcast, zero_mac, pod_ip);
				arps++;
			} else {
				ping_send(++seq);
			}
		}
	}
	print("MICROVM: ping 10.77.0.1 ok (ARP requests ");
	printu(arps);
	print(", pod ");
	printmac(pod_mac);
	print(", echo reply to ");
	printu(reply_seq);
	print(" of ");
	printu(seq);
	print(", rtt ");
	printu(reply_rtt * 838 / 1000); /* a tick is 0.838 us */
	print(" us) guest ");
	printip(my_ip);
	print(", ");
	printu(now() / MS(1));
	print(" ms after entry\n");

	/* serve the pod (ARP, its pings) until it says done on TCP 7777 (tcp_in ends it); 60 s */
	t0 = now();
	while (now() - t0 < MS(60000))
		poll();
	fail("no done from the pod on TCP 7777 in 60 s");
}
