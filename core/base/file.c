/*
 * file.c — regular-file inputs, safe output paths, checked output streams,
 * directory creation and the run lock of a directory (see file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h> /* flock */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* "a directory", "a FIFO", ... for messages. */
static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

ts_status ts_file_open_read_fd(const char *path, const char *what, int *out) {
    *out = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ts_error(TS_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ts_error(TS_ERR_IO, "%s %s: cannot stat: %s", what, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ts_error(TS_ERR_IO, "%s %s: is %s; a regular file is required", what, path,
                        file_kind(sb.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    *out = fd;
    return TS_OK;
}

ts_status ts_file_open_read(const char *path, const char *what, FILE **out) {
    *out = NULL;
    int fd;
    TS_TRY(ts_file_open_read_fd(path, what, &fd));
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return ts_error(TS_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(e));
    }
    *out = f;
    return TS_OK;
}

ts_status ts_file_output_path(const char *path, const char *what, char *out, size_t size) {
    struct stat sb;
    if (!path || !*path) return ts_error(TS_ERR_IO, "%s: the path is empty", what);
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            return ts_error(TS_ERR_IO, "%s %s: cannot stat: %s", what, path, strerror(errno));
        snprintf(out, size, "%s", path); /* a new file */
        return TS_OK;
    }
    if (S_ISLNK(sb.st_mode)) {
        char target[PATH_MAX];
        if (!realpath(path, target))
            return ts_error(TS_ERR_IO, "%s %s: the symbolic link cannot be followed: %s", what,
                            path, strerror(errno));
        if (stat(target, &sb) != 0)
            return ts_error(TS_ERR_IO, "%s %s: cannot stat %s: %s", what, path, target,
                            strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return ts_error(TS_ERR_IO,
                            "%s %s: leads to %s, which is %s; refusing to replace it (give the "
                            "path of a regular file or a new one)",
                            what, path, target, file_kind(sb.st_mode));
        if ((size_t)snprintf(out, size, "%s", target) >= size)
            return ts_error(TS_ERR_IO, "%s %s: the resolved path is too long", what, path);
        return TS_OK;
    }
    if (!S_ISREG(sb.st_mode))
        return ts_error(TS_ERR_IO,
                        "%s %s: is %s; refusing to replace it (give the path of a regular file or "
                        "a new one)",
                        what, path, file_kind(sb.st_mode));
    if ((size_t)snprintf(out, size, "%s", path) >= size)
        return ts_error(TS_ERR_IO, "%s %s: the path is too long", what, path);
    return TS_OK;
}

ts_status ts_file_probe_output(const char *path, const char *what) {
    char final[PATH_MAX], probe[PATH_MAX + 16];
    TS_TRY(ts_file_output_path(path, what, final, sizeof final));
    snprintf(probe, sizeof probe, "%s.tmp.XXXXXX", final);
    int fd = mkstemp(probe);
    if (fd < 0)
        return ts_error(TS_ERR_IO, "%s %s: cannot create files there: %s", what, path,
                        strerror(errno));
    close(fd);
    unlink(probe);
    return TS_OK;
}

ts_status ts_file_truncate_steps_after(const char *path, int64_t step) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return TS_OK;
        return ts_error(TS_ERR_IO, "metrics %s: cannot stat: %s", path, strerror(errno));
    }
    FILE *f;
    TS_TRY(ts_file_open_read(path, "metrics", &f));
    char line[256];
    long keep = 0;
    while (fgets(line, sizeof line, f)) {
        long long n;
        int len = 0;
        if (sscanf(line, "{\"step\":%lld,%n", &n, &len) != 1 || len == 0 || n > step) break;
        /* The rest of a long line; a line is whole only with its '\n'. */
        int whole = strchr(line, '\n') != NULL, c;
        while (!whole && (c = fgetc(f)) != EOF)
            whole = c == '\n';
        if (!whole) break;
        keep = ftell(f);
    }
    fclose(f);
    if (keep < sb.st_size && truncate(path, keep) != 0)
        return ts_error(TS_ERR_IO, "metrics %s: cannot cut it after step %lld: %s", path,
                        (long long)step, strerror(errno));
    return TS_OK;
}

ts_status ts_file_stream_open(ts_file_stream *s, const char *path, const char *what,
                              const char *mode) {
    memset(s, 0, sizeof *s);
    s->what = what;
    /* A stream may also go to a character device (/dev/null) or a pipe
     * (/dev/stdout under a pipe): writing to one replaces nothing. Opened
     * non-blocking, a FIFO that nobody reads is an error, not a hang. */
    struct stat sb;
    if (stat(path, &sb) == 0 && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
        snprintf(s->path, sizeof s->path, "%s", path);
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | (strchr(mode, 'a') ? O_APPEND : 0));
        if (fd < 0)
            return ts_error(TS_ERR_IO, "%s %s: cannot open for writing: %s", what, path,
                            errno == ENXIO ? "a FIFO that no process reads" : strerror(errno));
        int flags = fcntl(fd, F_GETFL);
        if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        s->f = fdopen(fd, strchr(mode, 'a') ? "a" : "w");
        if (!s->f) close(fd);
    } else {
        TS_TRY(ts_file_output_path(path, what, s->path, sizeof s->path));
        s->f = fopen(s->path, mode);
    }
    if (!s->f)
        return ts_error(TS_ERR_IO, "%s %s: cannot open for writing: %s", what, path,
                        strerror(errno));
    return TS_OK;
}

ts_status ts_file_stream_flush(ts_file_stream *s) {
    if (!s->f) return TS_OK;
    errno = 0;
    int bad = fflush(s->f) != 0 || ferror(s->f);
    if (bad)
        return ts_error(TS_ERR_IO, "%s %s: write failed: %s", s->what, s->path,
                        errno ? strerror(errno) : "stream error");
    return TS_OK;
}

ts_status ts_file_stream_close(ts_file_stream *s) {
    if (!s || !s->f) return TS_OK;
    ts_status st = ts_file_stream_flush(s);
    errno = 0;
    if (fclose(s->f) != 0 && !st)
        st = ts_error(TS_ERR_IO, "%s %s: close failed: %s", s->what, s->path,
                      errno ? strerror(errno) : "stream error");
    s->f = NULL;
    return st;
}

ts_status ts_file_make_dir(const char *dir, const char *what) {
    char buf[PATH_MAX];
    if (!dir || !*dir) return ts_error(TS_ERR_IO, "%s: the directory name is empty", what);
    if (strlen(dir) >= sizeof buf) return ts_error(TS_ERR_IO, "%s %s: path too long", what, dir);
    strcpy(buf, dir);
    /* Each prefix ending before a '/', then the whole path. */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return ts_error(TS_ERR_IO, "%s %s: cannot create %s: %s", what, dir, buf,
                            strerror(errno));
        *p = c;
        if (c == '\0') break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return ts_error(TS_ERR_IO, "%s %s: cannot stat: %s", what, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ts_error(TS_ERR_IO, "%s %s: is %s, not a directory", what, dir,
                        file_kind(sb.st_mode));
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.tessera-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ts_error(TS_ERR_IO, "%s %s: cannot create files there: %s", what, dir,
                        strerror(errno));
    close(fd);
    unlink(probe);
    return TS_OK;
}

/* The holder's description from a lock file's text ("host H pid P since T"). */
static void lock_holder(int fd, char *buf, size_t size) {
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n < 0) n = 0;
    buf[n] = '\0';
    char *nl = strchr(buf, '\n');
    if (nl) *nl = '\0';
    if (!buf[0]) snprintf(buf, size, "an unknown process");
}

/* Opens and flocks DIR's lock file: *fd >= 0 when held; -1 with TS_OK when
 * the file was replaced under us (the caller tries again). */
static ts_status lock_try(ts_dir_lock *lock, const char *dir, const char *what, int *out) {
    *out = -1;
    /* The lock is truncated and written: a symbolic link planted at its
     * name is refused, not followed (its target would be overwritten), and
     * so is anything but a regular file (non-blocking: a FIFO fails). */
    int fd = open(lock->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
        return ts_error(TS_ERR_IO, "%s %s: cannot create the lock %s: %s", what, dir, lock->path,
                        errno == ELOOP ? "it is a symbolic link (refusing to follow it; remove it)"
                                       : strerror(errno));
    struct stat ls;
    if (fstat(fd, &ls) != 0 || !S_ISREG(ls.st_mode)) {
        close(fd);
        return ts_error(TS_ERR_IO, "%s %s: the lock %s is not a regular file (remove it)", what,
                        dir, lock->path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    char holder[512];
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        lock_holder(fd, holder, sizeof holder);
        close(fd);
        if (e == EWOULDBLOCK)
            return ts_error(TS_ERR_IO,
                            "%s %s is in use by another run (%s; lock file %s): two runs must "
                            "not share a checkpoint directory",
                            what, dir, holder, lock->path);
        return ts_error(TS_ERR_IO, "%s %s: cannot lock %s: %s", what, dir, lock->path, strerror(e));
    }
    /* A holder that released its lock removed the file first: ours must
     * still be the file at that path. */
    struct stat mine, there;
    if (fstat(fd, &mine) != 0 || stat(lock->path, &there) != 0 || mine.st_ino != there.st_ino ||
        mine.st_dev != there.st_dev) {
        close(fd);
        return TS_OK;
    }
    *out = fd;
    return TS_OK;
}

ts_status ts_dir_lock_acquire(ts_dir_lock *lock, const char *dir, const char *what) {
    lock->fd = -1;
    snprintf(lock->path, sizeof lock->path, "%s/tessera.lock", dir);
    int fd = -1;
    for (int tries = 0; fd < 0; tries++) {
        if (tries == 8)
            return ts_error(TS_ERR_IO, "%s %s: the lock %s keeps being replaced", what, dir,
                            lock->path);
        TS_TRY(lock_try(lock, dir, what, &fd));
    }
    char holder[512];
    /* Ours now. A holder still written in the file died without removing it. */
    lock_holder(fd, holder, sizeof holder);
    struct stat sb;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0)
        fprintf(stderr,
                "tessera: %s %s: taking over the lock left by %s, which is no longer "
                "running\n",
                what, dir, holder);
    char host[256] = "unknown-host", text[512];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(text, sizeof text, "host %s pid %ld since %s\n", host, (long)getpid(), when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return ts_error(TS_ERR_IO, "%s %s: cannot write the lock %s: %s", what, dir, lock->path,
                        strerror(e));
    }
    lock->fd = fd;
    return TS_OK;
}

void ts_dir_lock_release(ts_dir_lock *lock) {
    if (!lock || lock->fd < 0) return;
    unlink(lock->path);
    close(lock->fd);
    lock->fd = -1;
}
