/*
 * file.h — the file rules every reader and writer of the core follows, so
 * that bad paths end in a message rather than a hang, a signal or lost data:
 *
 *   - inputs (configurations, data, checkpoints, llm.c files) must be regular
 *     files: a FIFO would block forever, a directory or device is no input;
 *   - outputs replace only a regular file or create a new one (never a device
 *     node, a directory or a FIFO at that path); through a symbolic link they
 *     write the file it points to;
 *   - streamed outputs (metrics, traces, reports) check every write, so a full
 *     disk is an error naming the file, not a silent truncation;
 *   - a directory used by a run (checkpoints) is created with its parents,
 *     checked writable, and locked for the run's lifetime.
 *
 * What it does not do: buffering policy, formats, or retries.
 */
#ifndef TESSERA_CORE_FILE_H
#define TESSERA_CORE_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens `path` for reading (binary) after checking it is a regular file;
 * `what` names the file's role in messages ("checkpoint", "data source").
 * The check and the open are one step (open non-blocking, then fstat), so a
 * FIFO never blocks. On success *out is an open stream owned by the caller. */
ts_status ts_file_open_read(const char *path, const char *what, FILE **out);
/* The same as a file descriptor (O_RDONLY, blocking mode restored). */
ts_status ts_file_open_read_fd(const char *path, const char *what, int *fd);

/* Resolves the path an output to `path` must write: `path` itself when it
 * does not exist or is a regular file, the target of a symbolic link that
 * leads to a regular file; anything else (a directory, device, FIFO or
 * socket, a link leading nowhere) is an error naming `what` and the path. */
ts_status ts_file_output_path(const char *path, const char *what, char *out, size_t size);

/* Checks at start-up that an output written later can be created: the path
 * passes ts_file_output_path and a file can be made beside it (a temporary
 * one, removed at once). */
ts_status ts_file_probe_output(const char *path, const char *what);

/* For a JSON-lines file of one object per step, each line beginning
 * {"step":N, — keeps the lines up to the first one whose N exceeds `step`
 * (or that is incomplete or not of that form) and cuts the file there. A
 * missing file is fine (nothing to keep). */
ts_status ts_file_truncate_steps_after(const char *path, int64_t step);

/* A checked output stream: every write error (ENOSPC, EFBIG, EIO) is kept
 * and returned by ts_file_stream_flush / _close as an error naming the file. */
typedef struct ts_file_stream {
    FILE *f;
    char path[1024];
    const char *what;
} ts_file_stream;

/* Opens for writing ("w" or "a" in `mode`) a path ts_file_output_path
 * accepts, or a character device or a pipe that a process reads
 * (/dev/null, /dev/stdout): writing to those replaces nothing. */
ts_status ts_file_stream_open(ts_file_stream *s, const char *path, const char *what,
                              const char *mode);
/* Flushes and checks the stream's error state. */
ts_status ts_file_stream_flush(ts_file_stream *s);
/* Flushes, closes and checks; a NULL or closed stream is fine. */
ts_status ts_file_stream_close(ts_file_stream *s);

/* Creates `dir` with its parents (mode 0755) when missing, and checks it is
 * a directory this process can create files in (by creating and removing a
 * probe file). `what` names the key in messages. */
ts_status ts_file_make_dir(const char *dir, const char *what);

/* The lock of a directory used by one run: DIR/tessera.lock holds the
 * holder's host and pid, and an advisory lock (flock) on it lives as long as
 * the holding process. A second run on DIR is refused with a message naming
 * the holder; a lock file left by a dead process (its flock is gone with it)
 * is taken over with a message on stderr. A symbolic link or anything but a
 * regular file at DIR/tessera.lock is refused, never followed (the lock is
 * truncated and written). */
typedef struct ts_dir_lock {
    int fd; /* -1 when not held */
    char path[1100];
} ts_dir_lock;

ts_status ts_dir_lock_acquire(ts_dir_lock *lock, const char *dir, const char *what);
/* Removes the lock file and releases the lock (no-op when not held). */
void ts_dir_lock_release(ts_dir_lock *lock);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_FILE_H */
