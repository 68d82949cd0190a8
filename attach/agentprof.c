/*
 * agentprof.c - read the heap profile an agent keeps in profile mode
 * (memattach profile start) out of the target's memory, as a heap_v2
 * profile: per stack, the sampled objects still live and those allocated
 * since start (its mappings are not filled: the dump's writer appends the
 * kernel's maps).  Nothing is stopped: the counters are the agent's atomics,
 * read with process_vm_readv while the target runs, so the totals are a
 * moment's, as jemalloc's own dump is (it does not stop the other threads
 * either).
 */
#include <stdlib.h>
#include <string.h>

#include "fragctl.h"
#include "ma_error.h"
#include "runclock.h"

/* The agent's stack records, frames and per-stack counters, or MA_E_*. */
static int read_tables(pid_t pid, const struct ma_agent_ctl *c, struct ma_agent_stack **st,
		       uint64_t **fr, struct ma_agent_stackstat **stat)
{
	uint64_t ns = c->nstacks, nf = c->nframes;
	int rc;

	if (ns > c->stack_cap || nf > c->frame_cap || !c->stats_off)
		return ma_fail(MA_E_INTERNAL, "the agent's stack table is inconsistent");
	*st = calloc(ns ? ns : 1, sizeof(**st));
	*fr = calloc(nf ? nf : 1, sizeof(**fr));
	*stat = calloc(ns ? ns : 1, sizeof(**stat));
	if (!*st || !*fr || !*stat)
		return ma_fail(MA_E_NOMEM, "out of memory");
	if ((rc = ma_mem_read(pid, c->tables + c->stacks_off, *st, ns * sizeof(**st))) ||
	    (nf && (rc = ma_mem_read(pid, c->tables + c->frames_off, *fr, nf * sizeof(**fr)))) ||
	    (rc = ma_mem_read(pid, c->tables + c->stats_off, *stat, ns * sizeof(**stat))))
		return rc;
	return 0;
}

/* HP's stacks from the tables: every stack with something sampled, live or since start. */
static int fill_stacks(struct ma_heapprof *hp, const struct ma_agent_stack *st, uint64_t ns,
		       const uint64_t *fr, uint64_t nf, const struct ma_agent_stackstat *stat,
		       struct ma_agent_profile *info)
{
	size_t npcs = 0;

	hp->stacks = calloc(ns ? ns : 1, sizeof(*hp->stacks));
	hp->pcs = calloc(nf ? nf : 1, sizeof(*hp->pcs));
	if (!hp->stacks || !hp->pcs)
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (uint64_t i = 0; i < ns; i++) {
		struct ma_hp_stack *h;

		if (!stat[i].live_n && !stat[i].accum_n)
			continue;
		if (i == 0 || !st[i].n || (uint64_t)st[i].off + st[i].n > nf) {
			/* Stack 0: sampled while the stack table was full. */
			info->unrecorded_objs += stat[i].live_n;
			info->unrecorded_bytes += stat[i].live_bytes;
			continue;
		}
		h = &hp->stacks[hp->nstacks++];
		h->pc_first = npcs;
		h->npcs = st[i].n;
		memcpy(hp->pcs + npcs, fr + st[i].off, st[i].n * sizeof(*fr));
		npcs += st[i].n;
		h->objs = stat[i].live_n;
		h->bytes = stat[i].live_bytes;
		h->accum_objs = stat[i].accum_n;
		h->accum_bytes = stat[i].accum_bytes;
		h->scale = ma_heapprof_scale(h->objs, h->bytes, hp->period);
	}
	hp->npcs = npcs;
	return 0;
}

int ma_agent_profile_read(const struct ma_target *t, struct ma_heapprof *hp,
			  struct ma_agent_profile *info)
{
	struct ma_agent_view v;
	struct ma_agent_stack *st = NULL;
	struct ma_agent_stackstat *stat = NULL;
	uint64_t *fr = NULL;
	int rc;

	memset(hp, 0, sizeof(*hp));
	memset(info, 0, sizeof(*info));
	if ((rc = ma_agent_find(t, &v)))
		return rc;
	if (!v.loaded || v.foreign || v.ctl.state != MA_AGENT_RUNNING ||
	    v.ctl.mode != MA_AGENT_MODE_PROFILE)
		return ma_fail(MA_E_JEMALLOC, "no agent is profiling process %d", t->pid);
	info->rate = v.ctl.rate;
	info->mechanism = v.ctl.mechanism;
	info->started_unix_ns = v.ctl.started_unix_ns;
	info->captured_unix_ns = ma_unix_ns();
	info->live_samples = v.live;
	info->dropped_full = v.dropped_full;
	info->dropped_stacks = v.ctl.dropped_stacks;
	info->truncated_stacks = v.ctl.truncated_stacks;
	hp->period = v.ctl.rate;
	rc = read_tables(t->proc_pid, &v.ctl, &st, &fr, &stat);
	if (!rc)
		rc = fill_stacks(hp, st, v.ctl.nstacks, fr, v.ctl.nframes, stat, info);
	free(st);
	free(fr);
	free(stat);
	if (rc)
		ma_heapprof_release(hp);
	return rc;
}

bool ma_agent_profiling(const struct ma_target *t)
{
	struct ma_agent_view v;

	if (ma_agent_find(t, &v)) {
		ma_err_clear();
		return false;
	}
	return v.loaded && !v.foreign && v.ctl.state == MA_AGENT_RUNNING &&
	       v.ctl.mode == MA_AGENT_MODE_PROFILE;
}
