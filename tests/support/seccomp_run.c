/* SPDX-License-Identifier: Apache-2.0 */
/* seccomp_run: a classic-BPF interpreter for seccomp programs (dp_test.h), without cmocka: the
 * unit tests and tests/arm64/seccomp_check.c share it. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dp_test.h"

uint32_t dpt_seccomp_run(const struct sock_filter *prog, size_t n, uint32_t arch, int nr,
			 const uint64_t args[6])
{
	struct seccomp_data d = { .nr = nr, .arch = arch };
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = { 0 };

	memcpy(d.args, args, sizeof(d.args));
	for (size_t pc = 0; pc < n; pc++) {
		const struct sock_filter *f = &prog[pc];
		uint32_t k = f->k, v = BPF_SRC(f->code) == BPF_X ? x : f->k;
		bool t;

		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
		case BPF_LDX: {
			uint32_t *dst = BPF_CLASS(f->code) == BPF_LD ? &a : &x;
			if (BPF_MODE(f->code) == BPF_ABS && BPF_SIZE(f->code) == BPF_W && k % 4 == 0 &&
			    k <= sizeof(d) - 4)
				memcpy(dst, (const char *)&d + k, 4);
			else if (BPF_MODE(f->code) == BPF_IMM)
				*dst = k;
			else if (BPF_MODE(f->code) == BPF_MEM && k < BPF_MEMWORDS)
				*dst = mem[k];
			else if (BPF_MODE(f->code) == BPF_LEN)
				*dst = sizeof(d);
			else
				return SECCOMP_RET_KILL_PROCESS;
			break;
		}
		case BPF_ST:
		case BPF_STX:
			if (k >= BPF_MEMWORDS)
				return SECCOMP_RET_KILL_PROCESS;
			mem[k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
			break;
		case BPF_ALU:
			switch (BPF_OP(f->code)) {
			case BPF_ADD: a += v; break;
			case BPF_SUB: a -= v; break;
			case BPF_MUL: a *= v; break;
			case BPF_DIV: if (!v) return SECCOMP_RET_KILL_PROCESS; a /= v; break;
			case BPF_MOD: if (!v) return SECCOMP_RET_KILL_PROCESS; a %= v; break;
			case BPF_OR: a |= v; break;
			case BPF_AND: a &= v; break;
			case BPF_XOR: a ^= v; break;
			case BPF_LSH: a = v < 32 ? a << v : 0; break;
			case BPF_RSH: a = v < 32 ? a >> v : 0; break;
			case BPF_NEG: a = -a; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_JMP:
			switch (BPF_OP(f->code)) {
			case BPF_JA: pc += k; continue;
			case BPF_JEQ: t = a == v; break;
			case BPF_JGT: t = a > v; break;
			case BPF_JGE: t = a >= v; break;
			case BPF_JSET: t = (a & v) != 0; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			pc += t ? f->jt : f->jf;
			break;
		case BPF_RET:
			return BPF_RVAL(f->code) == BPF_A ? a : k;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				x = a;
			else
				a = x;
			break;
		default:
			return SECCOMP_RET_KILL_PROCESS;
		}
	}
	return SECCOMP_RET_KILL_PROCESS;
}
