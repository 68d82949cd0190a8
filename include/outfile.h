/*
 * outfile.h - output files and folders that memattach creates, never
 * reuses: it may run as root in folders other users can write (/tmp),
 * so nothing it writes follows a link or lands in a file someone else
 * prepared.  Files are written under a temporary name made with O_EXCL
 * and renamed over their name once complete, all relative to a folder
 * descriptor opened once; outputs are mode 0600, folders 0700.
 */
#ifndef MA_OUTFILE_H
#define MA_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* An output file that appears under its name only once complete. */
struct ma_outfile {
	int dirfd;	/* the folder it goes in (ours: closed at commit/abort) */
	char *name;	/* its name in that folder */
	char *tmp;	/* the temporary's name in that folder */
	char *path;	/* as the user named it, for messages */
	int fd;
};

/*
 * Create a temporary file for PATH in PATH's folder; 0 or MA_E_IO.  PATH
 * "-" is the standard output (ma_outfile_is_stdout), written as it comes:
 * commit only closes it, and an abort cannot take back what was written.
 */
int ma_outfile_open(struct ma_outfile *o, const char *path);
bool ma_outfile_is_stdout(const char *path);
/* The same for NAME in the folder DIRFD (duplicated); PATH for messages. */
int ma_outfile_openat(struct ma_outfile *o, int dirfd, const char *name, const char *path);
/* A stdio stream on the temporary (its own descriptor), or NULL with the error set. */
FILE *ma_outfile_stream(struct ma_outfile *o);
/* Close and rename over the name; 0 or MA_E_IO (the temporary is removed). */
int ma_outfile_commit(struct ma_outfile *o);
/* Close and remove the temporary file; safe on any state. */
void ma_outfile_abort(struct ma_outfile *o);
/* Write all of BUF; 0 or MA_E_IO. */
int ma_write_all(int fd, const void *buf, size_t len);

/*
 * Open the output folder PATH, creating it (mode 0700).  An existing
 * folder is taken only if it is a folder (not a link) owned by this user
 * that no one else can write; otherwise MA_E_PERM with what to do.
 * *EXISTED says which.  0 and *DIRFD, or MA_E_*.
 */
int ma_outdir_open(const char *path, int *dirfd, bool *existed);
/*
 * Make a new private folder "BASE.tmp.PID.XXXXXX" in PARENTFD (it is
 * renamed over BASE once complete); its name into NAME, its descriptor
 * into *FD.  0 or MA_E_IO.
 */
int ma_outdir_make_temp(int parentfd, const char *base, char *name, size_t len, int *fd);
/*
 * Remove the folder NAME of PARENTFD if empty; empty it first (its plain
 * files of ours) only if it carries the mark ma_outdir_make_temp gave it.
 */
void ma_outdir_remove(int parentfd, const char *name);
/*
 * Open the folder that holds PATH (PATH's last component into *BASE),
 * following only links of root or this user; fd, or MA_E_* with a message.
 */
int ma_open_parent(const char *path, const char **base);
/* Open the folder PATH so (an O_RDONLY descriptor); fd, or MA_E_* with a message. */
int ma_open_dir_trusted(const char *path);
/* The temporary folder FD is complete: drop its mark (after its rename). */
void ma_outdir_unmark(int fd);

/*
 * Remove what killed runs left while writing NAME in DIRFD:
 * "NAME.tmp.PID.*" temporaries (hidden for files) that are this user's and
 * whose memattach PID is no longer alive.  Through descriptors only.
 */
void ma_remove_stale_temps_at(int dirfd, const char *name);

#endif
