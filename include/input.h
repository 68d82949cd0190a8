/*
 * input.h - one way to read an offline input file (heap dump, stats JSON,
 * snapshot manifest), bounded against hostile inputs.
 *
 * Regular files are size-checked before anything is read, then mapped.
 * Pipes and FIFOs are read into memory up to the same bound and at most
 * MA_MAX_PIPE, and given up on when the writer stalls for MA_PIPE_STALL_S
 * (a FIFO without a writer reads as empty: the open never blocks).  Directories, devices (/dev/zero)
 * and sockets are refused, saying what they are.
 */
#ifndef MA_INPUT_H
#define MA_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ma_input {
	const char *data; /* not NUL-terminated; "" when empty */
	size_t len;
	bool mapped;
};

/*
 * Load PATH, which WHAT names in messages ("heap dump"), refusing more than
 * MAX bytes.  0, or MA_E_IO (cannot open, not a file), MA_E_FORMAT (too
 * large, empty), MA_E_NOMEM, with a one-line message.
 */
int ma_input_load(struct ma_input *in, const char *path, const char *what, uint64_t max);
void ma_input_release(struct ma_input *in);

/*
 * Open PATH (relative to DIRFD, or AT_FDCWD) for reading only if it is a
 * regular file: the file is looked at through an O_PATH descriptor first,
 * so a FIFO, a device or a socket put where a file was expected is never
 * opened (no blocking open, no driver side effect).  Links of other users
 * are not followed (ma_walk_trusted).  IN_ROOT instead resolves PATH with
 * DIRFD as its root (links cannot leave it).  The descriptor,
 * or -1 with errno set (EINVAL for a file that is not regular).
 */
int ma_open_regular(int dirfd, const char *path, bool in_root);
/* The same for a /proc magic link (map_files, fd): the kernel's link, followed. */
int ma_open_regular_proc_link(const char *path);
/*
 * Resolve PATH from the folder AT (or AT_FDCWD), one component at a time, following a
 * symbolic link only if root or this user owns it (another user's link,
 * in a folder it can write, could point anywhere root can read or
 * write).  DIR: PATH must be a folder.  An O_PATH descriptor, or -1 with
 * errno (EPERM and the link named in UNTRUSTED for another user's link);
 * *LINKS counts the links followed (start at 0).
 */
int ma_walk_trusted(int at, const char *path, bool dir, int *links, char *untrusted, size_t len);
/* ma_walk_trusted from the current folder, with a message when it fails: O_PATH fd or MA_E_*. */
int ma_open_trusted(const char *path, bool dir);

/* Bounds for the inputs memattach reads: far above any real one. */
#define MA_MAX_HEAP_DUMP (16ULL << 30)
#define MA_MAX_STATS_JSON (256ULL << 20)
#define MA_MAX_MANIFEST (16ULL << 20)
/* A pipe is read into memory: at most this much, of any kind of input. */
#define MA_MAX_PIPE (1ULL << 30)
/* A pipe whose writer sends nothing for this long is given up on
 * (MEMATTACH_TEST_PIPE_STALL_S=S overrides it, for the tests). */
#define MA_PIPE_STALL_S 60

#endif
