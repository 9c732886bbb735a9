/* The host side of a native run's start, in one process: what limits.launcher's shell chain
 * (unshare, sh, one mount per bind, setpriv: five programs, about 6 ms) does, in about one.
 * Built once into the cache by c_helpers.py where a C compiler is; the shell chain stays the
 * fallback. Every argument comes from the host's own plan for the run, none from a request.
 *
 *     wasm-runner-launch [--fsize BYTES] [--join FILE]... [--mount-ns private|slave]
 *                        [--bind SOURCE POINT]... [--user UID GID] -- PROGRAM ARGS...
 *
 * In that order: caps single-file size (soft and hard, as `ulimit -f`); joins the run's cgroups
 * ("0" into each FILE moves the writer: v1 `tasks` and v2 `cgroup.procs` alike); enters a new
 * mount namespace with that propagation; binds each SOURCE (recursively) onto its POINT; drops
 * to UID:GID without supplementary groups; execs PROGRAM (found on PATH, as the shell would).
 * A step that fails ends it with status 125 and a message on stderr, as the shell chain does. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "wasm-runner: %s%s (%s)\n", what, detail, strerror(errno));
    exit(125);
}

static unsigned long long number(const char *text) {
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *text == '\0' || *end != '\0') {
        errno = EINVAL;
        fail("bad launcher argument: ", text);
    }
    return value;
}

static void join(const char *file) {
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) fail("could not set up the run's limits: ", file);
    close(fd);
}

int main(int argc, char **argv) {
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *option = argv[i];
        int left = argc - i - 1;
        if (strcmp(option, "--fsize") == 0 && left >= 1) {
            rlim_t bytes = (rlim_t)number(argv[++i]);
            struct rlimit limit = {bytes, bytes};
            if (setrlimit(RLIMIT_FSIZE, &limit) != 0) fail("could not set up the run's limits", "");
        } else if (strcmp(option, "--join") == 0 && left >= 1) {
            join(argv[++i]);
        } else if (strcmp(option, "--mount-ns") == 0 && left >= 1) {
            const char *kind = argv[++i];
            unsigned long propagation = strcmp(kind, "slave") == 0 ? MS_SLAVE : MS_PRIVATE;
            if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | propagation, NULL) != 0)
                fail("could not make the run's mount namespace", "");
        } else if (strcmp(option, "--bind") == 0 && left >= 2) {
            const char *source = argv[++i], *point = argv[++i];
            if (mount(source, point, NULL, MS_BIND | MS_REC, NULL) != 0) fail("could not bind for the sandbox: ", source);
        } else if (strcmp(option, "--user") == 0 && left >= 2) {
            uid_t uid = (uid_t)number(argv[++i]);
            gid_t gid = (gid_t)number(argv[++i]);
            if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
                fail("could not drop to the sandbox user", "");
        } else {
            errno = EINVAL;
            fail("bad launcher argument: ", option);
        }
    }
    if (i + 1 >= argc) {
        errno = EINVAL;
        fail("no program to launch", "");
    }
    execvp(argv[i + 1], &argv[i + 1]);
    fprintf(stderr, "wasm-runner: could not start %s (%s)\n", argv[i + 1], strerror(errno));
    return 127;
}
