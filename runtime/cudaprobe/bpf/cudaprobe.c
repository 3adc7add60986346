//go:build ignore

// cudaprobe.c: one uprobe and one uretprobe program shared by every CUDA
// driver API entry point kvcanary traces. What to read for each symbol is data
// carried in the attach cookie (see cookie.go), so the kernel side never needs
// to know CUDA signatures: the entry program saves the six argument registers
// (plus one optional user-memory word, e.g. cuLaunchKernel's stream on the
// stack), the return program optionally dereferences one out-pointer argument
// (the CUgraph of cuStreamEndCapture, the CUgraphExec of cuGraphInstantiate,
// the CUdeviceptr of cuMemAlloc) and emits one fixed-size record to a ring
// buffer.
//
// vmlinux-free: only basic helpers and the x86-64 user-space pt_regs layout,
// so no BTF is needed to load it. Needs bpf_get_attach_cookie (Linux 5.15+).

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};
#define BPF_ANY 0
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0

// Wake the reader only once this much is pending; it also polls every 50 ms,
// so a quiet stream is still delivered promptly. Waking it for every record
// costs a cross-CPU wakeup per traced call.
#define WAKEUP_BYTES (256 * 1024)

// x86-64 register frame, user-space (uapi) field names, which bpf_tracing.h
// expects outside the kernel. Same layout as the kernel's struct pt_regs.
struct pt_regs {
	unsigned long r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8;
	unsigned long rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags, rsp, ss;
};

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define ARG6(x) ((x)->r9)

// Cookie layout, mirrored in cookie.go.
#define COOKIE_OUT(c) (((c) >> 24) & 0xf)      // 0: none; k+1: deref arg k at return
#define COOKIE_RBASE(c) (((c) >> 28) & 0xf)    // 0: none; 1: sp; k+2: arg k
#define COOKIE_ROFF(c) (((c) >> 32) & 0xffff)  // byte offset added to the read base

// Record flags, mirrored in record.go.
#define F_READ_OK 1
#define F_OUT_OK 2

// Drop counters, mirrored in probe_linux.go.
#define DROP_RINGBUF 0   // ring buffer full: a record was lost
#define DROP_INFLIGHT 1  // in-flight table full: a call's entry was not kept
#define DROP_NO_ENTRY 2  // a return without its entry (attached mid-call or evicted)
#define DROP_MAX 3

struct key {
	__u64 pid_tgid;
	__u64 cookie;
};

struct entry {
	__u64 start;
	__u64 args[6];
	__u64 rd;
	__u32 flags;
	__u32 pad;
};

struct record {
	__u64 cookie;
	__u32 pid;
	__u32 tid;
	__u64 start;
	__u64 end;
	__s64 ret;
	__u64 args[6];
	__u64 rd;
	__u64 out;
	__u32 flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct key);
	__type(value, struct entry);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

// Set at load: when non-zero, only processes in pids are traced.
volatile const __u8 filter_pids = 0;

static __always_inline void count_drop(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &which);
	if (n)
		*n += 1;
}

static __always_inline int wanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	if (!filter_pids)
		return 1;
	return bpf_map_lookup_elem(&pids, &tgid) != 0;
}

SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!wanted(id))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct entry e = {};
	e.start = bpf_ktime_get_ns();
	e.args[0] = PT_REGS_PARM1(ctx);
	e.args[1] = PT_REGS_PARM2(ctx);
	e.args[2] = PT_REGS_PARM3(ctx);
	e.args[3] = PT_REGS_PARM4(ctx);
	e.args[4] = PT_REGS_PARM5(ctx);
	e.args[5] = ARG6(ctx);

	__u64 base = 0;
	switch (COOKIE_RBASE(cookie)) {
	case 0:
		break;
	case 1:
		base = PT_REGS_SP(ctx);
		break;
	case 2:
		base = e.args[0];
		break;
	case 3:
		base = e.args[1];
		break;
	case 4:
		base = e.args[2];
		break;
	case 5:
		base = e.args[3];
		break;
	case 6:
		base = e.args[4];
		break;
	case 7:
		base = e.args[5];
		break;
	}
	if (base && bpf_probe_read_user(&e.rd, sizeof(e.rd), (void *)(base + COOKIE_ROFF(cookie))) == 0)
		e.flags |= F_READ_OK;

	struct key k = {.pid_tgid = id, .cookie = cookie};
	if (bpf_map_update_elem(&inflight, &k, &e, BPF_ANY))
		count_drop(DROP_INFLIGHT);
	return 0;
}

SEC("uretprobe")
int cuda_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!wanted(id))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct key k = {.pid_tgid = id, .cookie = cookie};
	struct entry *e = bpf_map_lookup_elem(&inflight, &k);
	if (!e) {
		count_drop(DROP_NO_ENTRY);
		return 0;
	}
	struct record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count_drop(DROP_RINGBUF);
		bpf_map_delete_elem(&inflight, &k);
		return 0;
	}
	r->cookie = cookie;
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->start = e->start;
	r->end = bpf_ktime_get_ns();
	r->ret = (__s64)PT_REGS_RC(ctx);
	for (int i = 0; i < 6; i++)
		r->args[i] = e->args[i];
	r->rd = e->rd;
	r->flags = e->flags;
	r->pad = 0;
	r->out = 0;

	__u32 out = COOKIE_OUT(cookie);
	if (out >= 1 && out <= 6) {
		__u64 p = e->args[(out - 1) & 7];
		if (p && bpf_probe_read_user(&r->out, sizeof(r->out), (void *)p) == 0)
			r->flags |= F_OUT_OK;
	}
	__u64 wake = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(r, wake);
	bpf_map_delete_elem(&inflight, &k);
	return 0;
}

char __license[] SEC("license") = "Dual MIT/GPL";
