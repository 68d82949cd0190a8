/*
 * target.h - what memattach knows about a target process before touching it:
 * its state (/proc/PID/status), its mappings, and where jemalloc lives in it.
 */
#ifndef MA_TARGET_H
#define MA_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ma_mapping {
	uint64_t start, end, offset;
	char perms[5];
	uint64_t inode;
	char *path; /* NULL for anonymous; "[stack]" etc. kept as is */
	bool deleted; /* path ended in " (deleted)" (suffix removed) */
};

struct ma_range {
	uint64_t lo, hi; /* [lo, hi) runtime addresses */
};

enum ma_je_flavour {
	MA_JE_UNPREFIXED,
	MA_JE_PREFIX_JE, /* je_mallctl */
	MA_JE_PREFIX_RJEM, /* _rjem_mallctl */
};

struct ma_jemalloc {
	char *object; /* path of the mapped object holding mallctl */
	bool is_static; /* linked into an object that is not libjemalloc*.so */
	enum ma_je_flavour flavour;
	const char *prefix; /* "", "je_" or "_rjem_" */
	uint64_t bias; /* runtime = link-time vaddr + bias */
	uint64_t mallctl, mallctlnametomib, mallctlbymib, malloc_stats_print;
	uint64_t malloc_usable_size; /* 0 if not found */
	struct ma_range *text; /* jemalloc's code, sorted, merged */
	size_t ntext;
#define MA_CODE_CHECKS 4
#define MA_CODE_CHECK_LEN 16
	/*
	 * jemalloc's thread-local storage (libjemalloc*.so, or tsd_tls where
	 * jemalloc is linked into the program): a thread whose copy still
	 * equals the initial image never called into jemalloc, and has no
	 * allocator state for a call to create.
	 */
	uint64_t tls_slot; /* runtime address of its TP-offset slot, or 0: cannot tell */
	bool tls_static; /* jemalloc in the program: tls_tpoff known from its file (tsd_tls) */
	int64_t tls_tpoff; /* the slot's value, once read (the same for every thread) */
	bool have_tpoff;
	unsigned char *tls_image; /* the initial image */
	size_t tls_len;
	unsigned char *tls_now; /* tls_len bytes to read a thread's block into (ma_kernel_touch'ed) */
	/*
	 * jemalloc's per-thread state byte (tsd's `state`) in that block, or
	 * -1 if it cannot be told: the one byte whose initial value is
	 * "uninitialized" (6 in 5.x, 5 upstream since the recompute state
	 * went).  The three states below that one mark a thread that only
	 * ever freed (no tcache) or whose state is torn down (exiting).
	 */
	int tls_state_off;
	unsigned char tls_state_uninit;
	uint64_t code_addr[MA_CODE_CHECKS]; /* mallctl & co., 0 if not checked */
	unsigned char code_bytes[MA_CODE_CHECKS][MA_CODE_CHECK_LEN]; /* the file's bytes there */
};

struct ma_proc_status {
	char name[64];
	char state; /* R, S, D, Z, T, t, X */
	pid_t tgid;
	pid_t tracer;
	uint64_t vm_rss, vm_hwm; /* bytes */
	uint64_t sig_pending, sig_shared_pending, sig_blocked; /* masks */
	uint64_t sig_ignored, sig_caught; /* dispositions SIG_IGN, a handler (process-wide) */
	long real_uid, threads; /* -1 when not read */
	pid_t ns_tgid, ns_pid; /* as the process itself sees them (its innermost pid namespace); 0 unread */
};

#define MA_MAX_STUB_SITES 16

/* Slack bytes after an executable segment, where the return stub can go. */
struct ma_stub_site {
	uint64_t addr; /* 16-byte aligned; MA_STUB_REGION bytes (arch.h) */
	size_t map_index; /* the private r-x file mapping holding it (in the maps first read) */
	unsigned rank; /* 0 the program, 1 the loader, libc or a NODELETE object, 2 one dlclose() may unmap */
	unsigned char orig[672]; /* the file's bytes there (>= MA_STUB_REGION) */
};

struct ma_target {
	pid_t pid;
	/*
	 * Where to read process-wide /proc files (maps, mem, map_files, exe,
	 * fd, status's Vm* lines) and transfer memory: PID, or a live thread's
	 * id when the main thread has called pthread_exit (its /proc/PID/maps
	 * is then empty and its memory unreachable; /proc/TID/ has them all).
	 */
	pid_t proc_pid;
	/*
	 * A seccomp state (ma_seccomp_state: mode and filter count) whose
	 * filter a stopped thread showed to allow restart_syscall (0: none
	 * known): threads asleep in a timed wait under it may be stopped
	 * (session_restart.c: thread_refused_for_restart).
	 */
	long restart_ok_state;
	/*
	 * The same for a filter a stopped thread showed to have no
	 * USER_NOTIF answer: running threads under it may be stopped (one
	 * could otherwise enter a wait for its supervisor before its stop).
	 */
	long notify_free_state;
	struct ma_mapping *maps;
	size_t nmaps;
	struct ma_jemalloc je;
	struct ma_stub_site stub_sites[MA_MAX_STUB_SITES]; /* lowest address first */
	struct ma_range fork_fn; /* libc's fork(), {0,0} if not found */
	struct ma_range epoll_fn[2]; /* libc's epoll_wait(), epoll_pwait() */
	struct ma_range loader; /* the dynamic loader's code (ld-*.so) */
	struct ma_range agent; /* memattach's frag agent (its memfd mapping), {0,0} if absent */
	/* libc's dlopen and dlerror (glibc >= 2.34 has them in libc), 0 if absent */
	uint64_t dlopen_fn, dlerror_fn;
	/*
	 * glibc's description of where a thread descriptor keeps its thread's
	 * tid (_thread_db_pthread_tid, for libthread_db: bits, count, offset),
	 * 0 if absent; the offset once read (-1: none, 0: not read yet).
	 */
	uint64_t pthread_tid_desc;
	int pthread_tid_off;
	/*
	 * libc functions that run with the loader's locks held (dlopen,
	 * dl_iterate_phdr...): a thread inside one is not borrowed for a
	 * dlopen (for_dlopen set), since ours would nest in its work.
	 */
#define MA_MAX_DL_FNS 10
	struct ma_range dl_fns[MA_MAX_DL_FNS];
	size_t ndl_fns;
	bool for_dlopen;
	/*
	 * A thread of memattach's own (ownthread.h) is made in the borrowed
	 * thread: its libc functions (0 if absent) and libc's code.  With
	 * for_thread_create set, a thread inside a libc function that holds
	 * the thread-stack lock (pthread_create, pthread_join...), or with no
	 * frame outside libc (a thread starting or ending), is not borrowed:
	 * pthread_create would wait for that lock, held by itself.
	 */
	struct ma_own_fns {
		uint64_t create, attr_init, attr_setdetach, attr_destroy,
			attr_setstacksize, sleep;
		/* libc's syscall(): the making's last entry signals its end (ownthread.c) */
		struct ma_range syscall_fn;
	} own_fns;
	uint64_t find_object_fn; /* libc's _dl_find_object (glibc 2.35+), for the frag agent; 0 none */
	struct ma_range libc_code;
#define MA_MAX_THREAD_FNS 32
	struct ma_range thread_fns[MA_MAX_THREAD_FNS];
	size_t nthread_fns;
	bool for_thread_create;
	/* ... and its call was given up at a wait on a loader lock (session_run.c): worth another try. */
	bool loader_lock_given_up;
	size_t nstub_sites;
	bool je_pending; /* the program needs libjemalloc, not mapped yet (still loading) */
};

/* Read /proc/PID/status (or /proc/PID/task/TID/status if tid > 0). */
int ma_proc_read_status(pid_t pid, pid_t tid, struct ma_proc_status *st);
/*
 * The process's status: /proc/PID/status, except that when the main thread
 * has exited (a zombie) while others run, state and VmRSS/VmHWM come from a
 * live thread -- the process is alive.  Z/X only when it is really gone.
 */
int ma_process_status(pid_t pid, struct ma_proc_status *st);
/* The parent of process PID (/proc/PID/stat); -1 unknown. */
pid_t ma_process_parent(pid_t pid);
/* When process PID started, in clock ticks since boot (/proc/PID/stat); -1 unknown. */
int64_t ma_process_start_ticks(pid_t pid);
/*
 * Is thread TID of PID gone or on its way out: exited, exiting (the
 * kernel's PF_EXITING), or killed (SIGKILL pending)?
 */
/* Read a /proc comm file at PATH into OUT (LEN bytes) whole, without the kernel's newline; 0 ok. */
int ma_read_comm_file(const char *path, char *out, size_t len);
bool ma_thread_going(pid_t pid, pid_t tid);
/*
 * The syscall thread TID of PID is blocked in (the first number of its
 * /proc .../syscall, which the kernel writes); -1 if it runs, is gone or
 * is in none.
 */
long ma_thread_syscall_nr(pid_t pid, pid_t tid);
/*
 * Is thread TID asleep in a wait that the kernel goes on with through
 * restart_syscall after any stop (nanosleep, a relative clock_nanosleep,
 * a futex wait or poll with a timeout, restart_syscall itself)?  Its
 * name, or NULL (another syscall, running, or unreadable).  *NR: the
 * syscall it sleeps in, from the same read (-1: running, or unreadable).
 */
const char *ma_thread_restart_block_wait(pid_t pid, pid_t tid, long *nr);
/*
 * The time thread TID has spent runnable but waiting for a CPU, all its
 * life (/proc's schedstat, in ns).  false if the kernel does not say.
 */
bool ma_thread_cpu_wait_ns(pid_t pid, pid_t tid, uint64_t *ns);
/*
 * Is thread TID blocked until its seccomp supervisor answers a syscall
 * (SECCOMP_RET_USER_NOTIF; /proc's wchan)?  A stop withdraws that request
 * and the syscall, issued again, reaches the supervisor a second time.
 */
bool ma_thread_awaits_seccomp_supervisor(pid_t pid, pid_t tid);
/* Is NR a sleep (nanosleep, clock_nanosleep, or the restart of one)? */
bool ma_syscall_is_sleep(long nr);
/*
 * The signals PID's dispositions ignore (bit N-1 for signal N): SIG_IGN,
 * and SIGCHLD, SIGCONT, SIGURG, SIGWINCH unless caught.  The kernel drops
 * one when it is sent, unless the thread it is sent to is traced: then it
 * is queued and may wake another thread's wait (a stop's harm; 0 if
 * unreadable).
 */
uint64_t ma_signals_ignored(pid_t pid);
/* Has thread TID of PID child processes (their SIGCHLD goes to it)?  True when it cannot tell. */
bool ma_thread_has_children(pid_t pid, pid_t tid);
/* Bit N-1 of a signal mask as /proc shows it: signal N. */
#define MA_SIG_BIT(sig) (1ULL << ((sig) - 1))
/*
 * Which of IGNORED (ma_signals_ignored) a stop of thread TID would let
 * loose: all of them for the main thread (a kill() of the process goes to
 * it), SIGCHLD for a thread with children (their exit signals it), none
 * for any other.
 */
uint64_t ma_signals_a_stop_frees(pid_t pid, pid_t tid, uint64_t ignored);
/*
 * Room for a thread more in PID without taking the program's last: its
 * user's RLIMIT_NPROC (every thread of that real uid counts; root is
 * exempt) and its cgroup's pids.max each leave MA_THREAD_SLACK tasks.
 * False with WHY set when not.
 */
#define MA_THREAD_SLACK 8
bool ma_process_thread_room(pid_t pid, char *why, size_t whylen);
/* A thread of PID but EXCEPT that does not block a signal of MASK (*SIG: which); 0 if none. */
pid_t ma_thread_unblocking(pid_t pid, pid_t except, uint64_t mask, int *sig);
/* Does T map a dynamic loader (a file named ld-*)? */
bool ma_target_maps_loader(const struct ma_target *t);
/* Is a thread of PID inside execve (the others being killed)?  Judged by its first 64 threads. */
bool ma_process_in_exec(pid_t pid);
/* Is PID stopped by job control (SIGSTOP...)?  Judged by threads other than EXCEPT. */
bool ma_process_job_stopped(pid_t pid, pid_t except);
/*
 * Has process PID exited or begun to (killed, or exit_group): gone, or
 * every thread going?  An exec kills the other threads too, but not the
 * one that execs: that process has not exited.
 */
bool ma_process_exited(pid_t pid);
/*
 * Is one of PID's threads going (exited, exiting, SIGKILL pending), or the
 * process gone?  A process being killed, or one whose exec is killing its
 * other threads.
 */
bool ma_process_going(pid_t pid);
/*
 * A step of a run on PID failed with RC: if the process has exited
 * meanwhile, that is the reason, whatever the step saw (its maps empty,
 * ptrace refused, its code gone as if it had exec'd...): the message
 * becomes "process PID exited during the run" and MA_E_EXITED is
 * returned; else RC.  For steps after the process was found.
 */
int ma_fail_if_exited(pid_t pid, int rc);
/*
 * Bytes of [ADDR, ADDR+LEN) in process PID that are in RAM or swap (its
 * pagemap); -1 if unreadable.
 */
int64_t ma_target_resident(pid_t pid, uint64_t addr, uint64_t len);
/* How many times a /proc/PID/maps was read in this process's life (tests). */
unsigned long ma_target_maps_read(void);
/* Check the process exists, is not a zombie, not traced, and read its maps. */
int ma_target_open(struct ma_target *t, pid_t pid);
/*
 * The mappings of T's process as they are now, into NOW (release with
 * ma_target_release): T's own list is from when it was opened.
 */
int ma_target_maps_now(const struct ma_target *t, struct ma_target *now);
/*
 * T's list of mappings replaced by the process's mappings now (a thread
 * made since T was opened has its stack there); what T found in them
 * (jemalloc, stub sites, libc's functions) stays.  0 or MA_E_*.
 */
int ma_target_maps_refresh(struct ma_target *t);
/* Locate mallctl & co. in the mapped objects and jemalloc's code ranges. */
int ma_target_find_jemalloc(struct ma_target *t);
/* What jemalloc holds for one thread, as its thread-local block tells. */
enum ma_je_thread_state {
	MA_JE_STATE_UNKNOWN = -1, /* unreadable, or no block known: count as full */
	MA_JE_STATE_NONE = 0, /* the initial image: never called into jemalloc */
	MA_JE_STATE_FULL = 1, /* initialized (a tcache if enabled) */
	/*
	 * It only ever freed: jemalloc gave it no tcache, because such a free
	 * may come from a thread's exit, after its destructors ran.  A call
	 * there (mallctl initializes the thread in full) would link a tcache
	 * into an arena that no destructor removes when the thread ends: the
	 * next statistics merge follows it into freed memory.
	 */
	MA_JE_STATE_MINIMAL = 2,
	MA_JE_STATE_EXITING = 3, /* torn down by its destructor (purgatory, reincarnated) */
};
/* The state of thread TID (stopped, with thread pointer TP). */
enum ma_je_thread_state ma_thread_je_state(struct ma_target *t, pid_t tid, uint64_t tp);
/*
 * Read libjemalloc's TLS offset (the slot the loader filled) through
 * thread TID, and prepare the buffer a thread's block is read into, once:
 * before a stop, so ma_thread_je_state only reads the block in the
 * hold.  0, or -1 (no slot, unreadable, or no memory).
 */
int ma_target_read_tls_offset(struct ma_target *t, pid_t tid);

/* A process found by ma_jemalloc_processes. */
struct ma_je_process {
	pid_t pid;
	char comm[64];
	uint64_t vm_rss; /* bytes */
	char object[256]; /* the object holding mallctl */
	bool is_static;
};

/*
 * The processes (other than this one) that hold a jemalloc, from their
 * maps and symbols only (nothing is stopped), whose name matches KEEP
 * (NULL: all).  Up to MAX into OUT, by pid; returns how many.
 */
size_t ma_jemalloc_processes(bool (*keep)(void *ctx, const char *comm), void *ctx,
			     struct ma_je_process *out, size_t max);
/* True if ADDR lies in jemalloc's code. */
bool ma_target_in_jemalloc(const struct ma_target *t, uint64_t addr);
/* True if process PID is a memattach (another run: wait for it, do not refuse). */
bool ma_is_memattach(pid_t pid);
/* The command name of PID ("?" if gone); a static buffer. */
const char *ma_comm_of(pid_t pid);
/* True if a thread of PID is neither a zombie nor exiting. */
/* A thread of PID that is not a zombie, or 0. */
pid_t ma_live_thread_of(pid_t pid);
/*
 * Re-read the maps: 0 if the mappings holding each of ADDRS are the ones
 * read at open, else MA_E_EXITED (the process exec'd meanwhile).
 */
int ma_target_maps_unchanged(const struct ma_target *t, const uint64_t *addrs, size_t n);
/*
 * 0 if the first bytes of mallctl & co. in the target's memory are the
 * file's; MA_E_EXITED if not (a layout read mid-load or mid-exec).
 */
int ma_target_code_unchanged(const struct ma_target *t);
/* The mapping holding ADDR, or NULL. */
const struct ma_mapping *ma_target_mapping_at(const struct ma_target *t, uint64_t addr);
/* The lowest mapping of the file that M maps (where its ELF header is). */
const struct ma_mapping *ma_target_first_mapping(const struct ma_target *t,
						 const struct ma_mapping *m);
struct ma_elf;
/* Are mappings A and B of the same file (path and inode)? */
bool ma_target_same_object(const struct ma_mapping *a, const struct ma_mapping *b);
/* runtime address = link-time address + bias, for an ELF mapped from FIRST. */
uint64_t ma_target_load_bias(const struct ma_mapping *first, const struct ma_elf *e);
/* Open the file behind mapping M robustly (map_files, /proc/PID/root, exe). */
int ma_target_open_mapped_file(const struct ma_target *t, const struct ma_mapping *m);
void ma_target_release(struct ma_target *t);

/*
 * Have the kernel copy LEN bytes at P (memattach's own memory) onto
 * themselves.  The kernel's first access to a page of ours is slow on
 * our test machines, ~10 us a page, even for a page our own code has
 * written (pread of /proc/self/status into 8 pages just written by
 * memset: 9-27 us each; 4 us once the kernel had copied into them once):
 * buffers that ptrace, process_vm_* or pread fill or read during a hold
 * are passed through here before the stop.
 */
void ma_kernel_touch(void *p, size_t len);

/* Read / write target memory (process_vm_*v, falling back to /proc/PID/mem). */
/*
 * Where a thread descriptor of T keeps its thread's tid (glibc's
 * _thread_db_pthread_tid), read once: the offset, or -1 if not known.
 */
int ma_target_tid_offset(struct ma_target *t);
int ma_mem_read(pid_t pid, uint64_t addr, void *buf, size_t len);
int ma_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len);
/*
 * Write through MEM_FD, an open /proc/PID/mem (read-only mappings too,
 * with no open in the caller's hold); ma_mem_write where that fails.
 */
int ma_mem_write_fd(int mem_fd, pid_t pid, uint64_t addr, const void *buf, size_t len);

const char *ma_je_flavour_name(enum ma_je_flavour f);

#endif
