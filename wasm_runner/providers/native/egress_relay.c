/* The relay inside a native sandbox, in C: what egress_relay.py does, started in about a
 * millisecond where Python takes 12-17 (every native run with a network policy pays it, and
 * every one-shot run under deny, whose refusals it carries). Built once into the cache by
 * c_helpers.py where a C compiler is; egress_relay.py stays the fallback.
 *
 *     egress-relay PORT SOCKET -- PROGRAM ARGS...
 *
 * It listens on 127.0.0.1:PORT first, so the program never races it, then forks twice (the
 * relay ends up a child of the sandbox's init, out of the program's process tree, and dies with
 * the sandbox) and execs the program. Each TCP connection is served by a process of its own that
 * joins it to one connection to the run's Unix socket; all policy lives on the host's side. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_all(int fd, const char *data, ssize_t length) {
    while (length > 0) {
        ssize_t written = write(fd, data, (size_t)length);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += written;
        length -= written;
    }
    return 0;
}

/* Copies both ways until both directions have ended (a half-close is passed on). */
static void pump(int client, int upstream) {
    static char buffer[65536];
    struct pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
    int open[2] = {1, 1};
    while (open[0] || open[1]) {
        fds[0].fd = open[0] ? client : -1;
        fds[1].fd = open[1] ? upstream : -1;
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < 2; i++) {
            if (!open[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int from = i ? upstream : client, to = i ? client : upstream;
            ssize_t got = read(from, buffer, sizeof buffer);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0 || write_all(to, buffer, got) < 0) {
                shutdown(to, SHUT_WR);
                open[i] = 0;
            }
        }
    }
}

static void serve(int listener, const char *path) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    signal(SIGCHLD, SIG_IGN); /* connection processes are reaped by the system */
    signal(SIGPIPE, SIG_IGN); /* a peer gone is a failed write, not the relay's end */
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            _exit(0);
        }
        pid_t served = fork();
        if (served == 0) {
            close(listener);
            int one = 1;
            setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            int upstream = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (upstream >= 0 && connect(upstream, (struct sockaddr *)&address, sizeof address) == 0)
                pump(client, upstream);
            _exit(0);
        }
        close(client);
    }
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: egress-relay PORT SOCKET -- PROGRAM ARGS...\n");
        return 2;
    }
    if (strlen(argv[2]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        fprintf(stderr, "egress-relay: socket path too long\n");
        return 2;
    }
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (listener < 0 || setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
        || bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 128) != 0) {
        perror("egress-relay: listen");
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        if (fork() != 0) _exit(0);
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; fd++) dup2(null, fd);
        serve(listener, argv[2]);
        _exit(0);
    }
    if (child > 0) waitpid(child, NULL, 0);
    close(listener);
    execvp(argv[4], argv + 4);
    fprintf(stderr, "bwrap: execvp %s: %s\n", argv[4], strerror(errno));
    return 1; /* as bwrap itself does, so the run reads as CommandNotFound */
}
