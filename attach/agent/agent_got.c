/*
 * agent_got.c - the link-map pass: the GOT slots of the allocation
 * functions in every loaded object learnt, rewritten to the wrappers, and
 * put back (agent.c: why, and the rules this code keeps).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "agent_abi.h"
#include MA_ARCH_HEADER /* the relocation types of GOT slots */

#include "agent_int.h"

struct entry {
	const char *sym;
	bool prefixed;
	uint64_t wrapper;
};

static const struct entry entries[E_COUNT] = {
#define ENTRY(id, s, pre, kind, nargs) [E_##id] = { s, pre, 0 },
	ENTRY_POINTS(ENTRY)
#undef ENTRY
};

static uint64_t hex_field(const char **s, const char *end)
{
	uint64_t v = 0;

	for (; *s < end; (*s)++) {
		char ch = **s;
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;

		if (d < 0)
			break;
		v = v * 16 + (uint64_t)d;
	}
	return v;
}

/* The text of /proc/self/maps in a mapping of its own (*CAP bytes); NULL on failure. */
static char *read_maps_text(uint64_t *len, uint64_t *cap)
{
	for (uint64_t size = 1 << 18; size <= (1ULL << 30); size *= 4) {
		char *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		uint64_t n = 0;
		ssize_t r = 0;
		int fd;

		if (buf == MAP_FAILED)
			return NULL;
		/* thread-self: a process whose main thread has exited shows no maps under /proc/self */
		fd = open("/proc/thread-self/maps", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			munmap(buf, size);
			return NULL;
		}
		while (n < size && ((r = read(fd, buf + n, size - n)) > 0 || (r < 0 && errno == EINTR)))
			if (r > 0)
				n += (uint64_t)r;
		close(fd);
		if (r < 0) {
			munmap(buf, size);
			return NULL;
		}
		if (n < size) {
			*len = n;
			*cap = size;
			return buf;
		}
		munmap(buf, size);
	}
	return NULL;
}

bool maps_snapshot(struct maps *m)
{
	uint64_t len, cap, lines = 0;
	char *text = read_maps_text(&len, &cap);
	const char *s, *end;

	if (!text)
		return false;
	for (uint64_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	m->len = align_up((lines + 1) * sizeof(struct region), 4096);
	m->reg = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m->reg == MAP_FAILED) {
		munmap(text, cap);
		*m = (struct maps){ 0 };
		return false;
	}
	m->n = 0;
	for (s = text, end = text + len; s < end && m->n <= lines;) {
		const char *eol = memchr(s, '\n', (size_t)(end - s));
		struct region *r = &m->reg[m->n];

		if (!eol)
			eol = end;
		r->lo = hex_field(&s, eol);
		if (s < eol && *s == '-') {
			s++;
			r->hi = hex_field(&s, eol);
			if (eol - s >= 4 && *s == ' ') {
				r->prot = (s[1] == 'r' ? PROT_READ : 0) | (s[2] == 'w' ? PROT_WRITE : 0) |
					  (s[3] == 'x' ? PROT_EXEC : 0);
				m->n++;
			}
		}
		s = eol + 1;
	}
	munmap(text, cap);
	return true;
}

void maps_release(struct maps *m)
{
	if (m->reg)
		munmap(m->reg, m->len);
	*m = (struct maps){ 0 };
}

const struct region *maps_find(const struct maps *m, uint64_t a)
{
	uint64_t lo = 0, hi = m->n;

	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (a < m->reg[mid].lo)
			hi = mid;
		else if (a >= m->reg[mid].hi)
			lo = mid + 1;
		else
			return &m->reg[mid];
	}
	return NULL;
}

/* What a pass knows of one object. */
struct object {
	uint64_t base, lo, hi; /* load bias, and the span of its PT_LOAD segments */
	uint64_t relro_lo, relro_hi;
	const ElfW(Sym) *symtab;
	const char *strtab;
	uint64_t strsz;
	const ElfW(Rela) *rela, *jmprel;
	uint64_t nrela, njmprel;
	const uint32_t *gnu_hash, *sysv_hash; /* to count the dynamic symbols */
	bool unsettled; /* RELRO not yet protected: the loader is still relocating it */
};

static enum entry_id entry_named(const char *name, const char *prefix)
{
	size_t pl = strlen(prefix);

	for (int i = 0; i < E_COUNT; i++) {
		const char *n = name;

		if (entries[i].prefixed) {
			if (strncmp(n, prefix, pl) != 0)
				continue;
			n += pl;
		}
		if (strcmp(n, entries[i].sym) == 0)
			return (enum entry_id)i;
	}
	return E_COUNT;
}

/*
 * An unresolved lazy slot points at its own PLT entry's `push $index`
 * (after an endbr64 with IBT); a function never starts so.
 */
static bool is_lazy_stub(const struct object *o, uint64_t v)
{
	const unsigned char *b = (const unsigned char *)(uintptr_t)v;

	if (v < o->lo || v + 9 > o->hi)
		return false;
	return b[0] == 0x68 || (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa && b[4] == 0x68);
}

/*
 * Replace OLD by NEW in SLOT.  A slot on a read-only page (RELRO, which
 * the loader protects once the object is relocated) is made writable for
 * the store and protected again.
 */
static bool write_slot(struct pass *ps, const struct object *o, uint64_t *slot, uint64_t old,
		       uint64_t new)
{
	const struct region *r = maps_find(&ps->maps, (uint64_t)(uintptr_t)slot);
	uint64_t page = (uint64_t)(uintptr_t)slot & ~4095ULL;
	bool ok;

	if (!r || !(r->prot & PROT_READ))
		return false;
	if (r->prot & PROT_WRITE)
		return __atomic_compare_exchange_n(slot, &old, new, false, __ATOMIC_SEQ_CST,
						   __ATOMIC_RELAXED);
	(void)o;
	if (mprotect((void *)(uintptr_t)page, 4096, r->prot | PROT_WRITE))
		return false;
	ok = __atomic_compare_exchange_n(slot, &old, new, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
	mprotect((void *)(uintptr_t)page, 4096, r->prot);
	return ok;
}

/* How many entries O's dynamic symbol table has (from its hash table); 0 if unknown. */
static uint64_t dynsym_count(const struct object *o)
{
	if (o->gnu_hash) {
		const uint32_t *h = o->gnu_hash;
		uint32_t nbuckets = h[0], symoffset = h[1], bloom_words = h[2], last = 0;
		const uint32_t *buckets = h + 4 + 2 * bloom_words; /* 64-bit bloom words */
		const uint32_t *chain = buckets + nbuckets;

		for (uint32_t i = 0; i < nbuckets; i++)
			last = buckets[i] > last ? buckets[i] : last;
		if (last < symoffset)
			return symoffset;
		while (!(chain[last - symoffset] & 1))
			last++;
		return (uint64_t)last + 1;
	}
	return o->sysv_hash ? o->sysv_hash[1] : 0;
}

/*
 * The originals: the entry points jemalloc's object defines, from its
 * dynamic symbols (a slot still unresolved, lazily bound, tells nothing).
 */
static void learn_originals(struct pass *ps, const struct object *o)
{
	uint64_t n = dynsym_count(o);

	for (uint64_t i = 1; i < n; i++) {
		const ElfW(Sym) *sym = &o->symtab[i];
		uint64_t a = o->base + sym->st_value, none = 0;
		enum entry_id id;

		if (sym->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym->st_info) != STT_FUNC ||
		    sym->st_name >= o->strsz || a < ps->c->je_lo || a >= ps->c->je_hi)
			continue;
		id = entry_named(o->strtab + sym->st_name, ps->prefix);
		if (id != E_COUNT &&
		    !__atomic_compare_exchange_n(&agent_original[id], &none, a, false, __ATOMIC_SEQ_CST,
						 __ATOMIC_RELAXED) && none != a)
			ps->foreign++; /* not the one learnt at an earlier start: leave it alone */
	}
}

static void slot_pass(struct pass *ps, const struct object *o, const ElfW(Rela) *r)
{
	uint32_t type = (uint32_t)ELF64_R_TYPE(r->r_info), si = (uint32_t)ELF64_R_SYM(r->r_info);
	uint64_t addr = o->base + r->r_offset, v, w;
	enum entry_id id;
	uint64_t *slot;

	if ((type != MA_ARCH_R_JUMP_SLOT && type != MA_ARCH_R_GLOB_DAT) || !si || r->r_addend ||
	    o->symtab[si].st_name >= o->strsz || addr < o->lo || addr + 8 > o->hi || (addr & 7))
		return;
	id = entry_named(o->strtab + o->symtab[si].st_name, ps->prefix);
	if (id == E_COUNT)
		return;
	slot = (uint64_t *)(uintptr_t)addr;
	v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	w = agent_wrapper_of(id);
	if (ps->kind == PASS_RESTORE) {
		if (v == w && !(o->unsettled && addr >= o->relro_lo && addr < o->relro_hi))
			ps->patched += write_slot(ps, o, slot, w, orig(id));
		return;
	}
	if (v != w && (!orig(id) || (v != orig(id) && !(type == MA_ARCH_R_JUMP_SLOT && is_lazy_stub(o, v))))) {
		if (v)
			ps->foreign++; /* bound elsewhere (libstdc++'s own operator new...) */
		return;
	}
	if (v != w && ((o->unsettled && addr >= o->relro_lo && addr < o->relro_hi) ||
		       !write_slot(ps, o, slot, v, w))) {
		ps->failed++;
		return;
	}
	ps->patched++;
	ps->malloc_seen |= id == E_malloc || id == E_nw;
	ps->free_seen |= id == E_free || id == E_dl;
}

/* In memory the loader has made most d_ptr values absolute; some loaders do not. */
static uint64_t dyn_ptr(uint64_t base, uint64_t v)
{
	return base && v < base ? v + base : v;
}

static bool read_object(struct pass *ps, const struct dl_phdr_info *info, struct object *o)
{
	const ElfW(Dyn) *dyn = NULL;

	memset(o, 0, sizeof(*o));
	o->base = info->dlpi_addr;
	o->lo = ~0ULL;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t a = o->base + ph->p_vaddr;

		if (ph->p_type == PT_LOAD) {
			o->lo = a < o->lo ? a : o->lo;
			o->hi = a + ph->p_memsz > o->hi ? a + ph->p_memsz : o->hi;
		} else if (ph->p_type == PT_DYNAMIC) {
			dyn = (const ElfW(Dyn) *)(uintptr_t)a;
		} else if (ph->p_type == PT_GNU_RELRO) {
			o->relro_lo = a & ~4095ULL;
			o->relro_hi = (a + ph->p_memsz) & ~4095ULL;
		}
	}
	if (!dyn || o->lo >= o->hi)
		return false;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		uint64_t v = dyn->d_un.d_val;

		switch (dyn->d_tag) {
		case DT_SYMTAB: o->symtab = (const ElfW(Sym) *)(uintptr_t)dyn_ptr(o->base, v); break;
		case DT_STRTAB: o->strtab = (const char *)(uintptr_t)dyn_ptr(o->base, v); break;
		case DT_STRSZ: o->strsz = v; break;
		case DT_RELA: o->rela = (const ElfW(Rela) *)(uintptr_t)dyn_ptr(o->base, v); break;
		case DT_RELASZ: o->nrela = v / sizeof(ElfW(Rela)); break;
		case DT_JMPREL: o->jmprel = (const ElfW(Rela) *)(uintptr_t)dyn_ptr(o->base, v); break;
		case DT_PLTRELSZ: o->njmprel = v / sizeof(ElfW(Rela)); break;
		case DT_PLTREL: if (v != DT_RELA) o->njmprel = 0; break;
		case DT_GNU_HASH: o->gnu_hash = (const uint32_t *)(uintptr_t)dyn_ptr(o->base, v); break;
		case DT_HASH: o->sysv_hash = (const uint32_t *)(uintptr_t)dyn_ptr(o->base, v); break;
		default: break;
		}
	}
	if (o->relro_hi > o->relro_lo) {
		const struct region *r = maps_find(&ps->maps, o->relro_lo);

		o->unsettled = !r || (r->prot & PROT_WRITE);
	}
	return o->symtab && o->strtab;
}

static bool covers(const struct object *o, uint64_t a)
{
	return a >= o->lo && a < o->hi;
}

static bool is_loader(const char *name)
{
	const char *base = name ? strrchr(name, '/') : NULL;

	base = base ? base + 1 : name;
	return base && strncmp(base, "ld-", 3) == 0;
}

static int pass_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct pass *ps = arg;
	struct object o;

	(void)size;
	/*
	 * The map is read here, under the loader's list lock that
	 * dl_iterate_phdr holds for the whole walk, not before the walk: an
	 * object dlclose()d and dlopen()ed again in between lands at the same
	 * address, and a snapshot taken before would show the old copy's
	 * protected RELRO where the new copy is still being relocated (our
	 * mprotect back to read-only then faults the loader).  While the lock
	 * is held no object joins or leaves the list, so none is unmapped.
	 */
	if (!ps->maps.reg && !maps_snapshot(&ps->maps)) {
		ps->maps_failed = true;
		return 1;
	}
	if (is_loader(info->dlpi_name) || !read_object(ps, info, &o))
		return 0;
	if (covers(&o, ps->c->je_lo)) {
		if (ps->kind == PASS_LEARN)
			learn_originals(ps, &o);
		return 0; /* its own calls to its own entry points stay as they are */
	}
	if (ps->kind == PASS_LEARN || covers(&o, ps->c->self_lo))
		return 0;
	for (uint64_t i = 0; o.rela && i < o.nrela; i++)
		slot_pass(ps, &o, &o.rela[i]);
	for (uint64_t i = 0; o.jmprel && i < o.njmprel; i++)
		slot_pass(ps, &o, &o.jmprel[i]);
	return 0;
}

/* One pass of KIND over the link map; its counts go to the control block.  0 or -MA_AGENT_*. */
int got_run_pass(struct ma_agent_ctl *c, enum pass_kind kind, struct pass *ps)
{
	bool walked;

	memset(ps, 0, sizeof(*ps));
	ps->c = c;
	ps->kind = kind;
	ps->prefix = agent_prefix;
	dl_iterate_phdr(pass_object, ps);
	walked = ps->maps.reg != NULL; /* no object at all: the map was never read */
	maps_release(&ps->maps);
	if (ps->maps_failed || !walked)
		return -MA_AGENT_EMAPS;
	c->passes++;
	return MA_AGENT_OK;
}

/* Learn the originals, then point every slot of them at the wrappers. */
int got_patch_all(struct ma_agent_ctl *c)
{
	struct pass ps;
	int rc;

	if ((rc = got_run_pass(c, PASS_LEARN, &ps)) || (rc = got_run_pass(c, PASS_PATCH, &ps)))
		return rc;
	c->slots_patched = ps.patched;
	c->slots_failed = ps.failed;
	c->slots_foreign = ps.foreign;
	return ps.malloc_seen && ps.free_seen ? MA_AGENT_OK : -MA_AGENT_ENOSLOT;
}

int got_restore_all(struct ma_agent_ctl *c)
{
	struct pass ps;
	int rc = got_run_pass(c, PASS_RESTORE, &ps);

	if (!rc)
		c->slots_patched = 0;
	return rc;
}
