/*
 * targetfd.h - a descriptor that lives in the target, taken safely.
 *
 * The target controls its descriptor table: between memattach creating a
 * memfd there and using it, another of its threads can dup2 anything over
 * that number (a root-only file opened O_PATH, a FIFO, a device).  So
 * memattach never opens /proc/PID/fd/N with its own privileges: it takes
 * the descriptor itself (pidfd_getfd, which needs the same ptrace right
 * memattach already has) and checks it is the memfd it created before
 * reading or writing one byte.  A process whose main thread has exited
 * has no descriptor table under its pidfd: there the /proc link is
 * followed with O_PATH (which opens nothing) and the file opened only once
 * it is seen to be that memfd.
 */
#ifndef MA_TARGETFD_H
#define MA_TARGETFD_H

#include <stddef.h>
#include <sys/types.h>

/* memfd_create flags for a memfd to take: MFD_CLOEXEC | MFD_ALLOW_SEALING. */
#define MA_MEMFD_FLAGS 3U

/*
 * Take descriptor TARGET_FD of process PID (or of the live thread PID of
 * a process whose main thread exited) and check that it is a memfd
 * named NAME made with MFD_ALLOW_SEALING and no seal yet (no other kind
 * of file has that), holding at most MAX_SIZE bytes.  0 and *FD (ours,
 * close-on-exec), or MA_E_* with the reason.
 */
int ma_take_target_memfd(pid_t pid, int target_fd, const char *name, size_t max_size, int *fd);

#endif
