/*
 * sandgate-netns: the netns agent (apps/supervisor/src/workload/netns-agent.ts) as a small native
 * process (issue 16: a lean per-sandbox footprint, a sandbox ready sooner).
 *
 *   sandgate-netns PROXY_PORT        (started by the supervisor with a Node IPC channel)
 *
 * Enters a new network namespace, brings its loopback up, listens on 127.0.0.1:PROXY_PORT (the
 * egress proxy's socket) and hands that socket to the supervisor; then dials loopback ports
 * inside the namespace on request and hands over each connected socket. It keeps the namespace
 * alive: workload processes join it through /proc/<its pid>/ns/net. The protocol is the Node
 * agent's, unchanged, over the channel Node's child_process opens (NODE_CHANNEL_FD, JSON lines;
 * a descriptor travels as SCM_RIGHTS with a {"cmd":"NODE_HANDLE","type":...,"msg":...} line,
 * which Node turns into a net.Server or net.Socket):
 *   agent → supervisor  {op:'ready', port} + the listening socket
 *   supervisor → agent  {op:'dial', id, host, port, timeoutMs}   (host: 127.0.0.1 or ::1)
 *   agent → supervisor  {op:'dialed', id} + the connected socket | {op:'dial-failed', id, code, message}
 * It ends when the channel closes (the supervisor is gone) and dies with its parent.
 *
 * Why native: the Node agent is a second Node process per sandbox, idle almost always; its
 * start is on every sandbox's way to Ready and its memory on every sandbox's footprint
 * (BENCHMARKS.md, "The netns agent"). The Node agent stays as the fallback when this helper was
 * not built. Built by build.sh at `npm install` (Debian's C compiler, static).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_DIALS 256
#define MAX_TIMEOUT_MS 10000
#define LINE_MAX_BYTES 4096

static int channel = -1;

static void fatal(const char *what) {
  fprintf(stderr, "sandgate netns agent: %s: %s\n", what, strerror(errno));
  exit(1);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One JSON line to the supervisor, with a descriptor when fd >= 0 (then closed here: it has moved). */
static void send_line(const char *line, int fd) {
  struct iovec iov = {.iov_base = (void *)line, .iov_len = strlen(line)};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  /* Lines are short: one sendmsg, retried only when interrupted. A full channel blocks us. */
  while (sendmsg(channel, &msg, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) fatal("writing to the supervisor");
  }
  if (fd >= 0) close(fd);
}

/* The value of a numeric field of a flat JSON object, or -1. The supervisor writes these lines. */
static long long json_number(const char *line, const char *key) {
  char pattern[32];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *p = strstr(line, pattern);
  if (!p) return -1;
  char *end;
  long long v = strtoll(p + strlen(pattern), &end, 10);
  return end == p + strlen(pattern) ? -1 : v;
}

/* Whether a string field of a flat JSON object equals `want` exactly. */
static int json_string_is(const char *line, const char *key, const char *want) {
  char pattern[96];
  snprintf(pattern, sizeof pattern, "\"%s\":\"%s\"", key, want);
  return strstr(line, pattern) != NULL;
}

struct dial {
  int fd; /* -1: free */
  long long id;
  long long deadline;
  int v6;
  int port;
};
static struct dial dials[MAX_DIALS];

/* In the Node agent's words (Node's own: "connect ECONNREFUSED 127.0.0.1:22"), which callers show. */
static void dial_failed(const struct dial *d, int err) {
  char line[512];
  const char *code = strerrorname_np(err);
  if (!code) code = "EIO";
  if (err == ETIMEDOUT)
    snprintf(line, sizeof line, "{\"op\":\"dial-failed\",\"id\":%lld,\"code\":\"ETIMEDOUT\",\"message\":\"connect timed out\"}\n", d->id);
  else
    snprintf(line, sizeof line, "{\"op\":\"dial-failed\",\"id\":%lld,\"code\":\"%s\",\"message\":\"connect %s %s:%d\"}\n", d->id, code, code, d->v6 ? "::1" : "127.0.0.1", d->port);
  send_line(line, -1);
}

static void dial_done(struct dial *d) {
  char line[160];
  snprintf(line, sizeof line, "{\"cmd\":\"NODE_HANDLE\",\"type\":\"net.Socket\",\"msg\":{\"op\":\"dialed\",\"id\":%lld}}\n", d->id);
  send_line(line, d->fd);
  d->fd = -1;
}

static void start_dial(const char *line) {
  long long id = json_number(line, "id");
  long long port = json_number(line, "port");
  long long timeout = json_number(line, "timeoutMs");
  int v6 = json_string_is(line, "host", "::1");
  if (id < 0) return;
  if ((!v6 && !json_string_is(line, "host", "127.0.0.1")) || port < 1 || port > 65535) {
    char out[256];
    snprintf(out, sizeof out, "{\"op\":\"dial-failed\",\"id\":%lld,\"code\":\"EINVAL\",\"message\":\"only loopback targets can be dialled inside the sandbox\"}\n", id);
    send_line(out, -1);
    return;
  }
  if (timeout <= 0 || timeout > MAX_TIMEOUT_MS) timeout = MAX_TIMEOUT_MS;
  struct dial attempt = {.fd = -1, .id = id, .deadline = now_ms() + timeout, .v6 = v6, .port = (int)port};
  struct dial *d = NULL;
  for (int i = 0; i < MAX_DIALS && !d; i++)
    if (dials[i].fd < 0) d = &dials[i];
  if (!d) {
    dial_failed(&attempt, EAGAIN);
    return;
  }
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    dial_failed(&attempt, errno);
    return;
  }
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((unsigned short)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  int rc = v6 ? connect(fd, (struct sockaddr *)&a6, sizeof a6) : connect(fd, (struct sockaddr *)&a4, sizeof a4);
  if (rc < 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    dial_failed(&attempt, err);
    return;
  }
  /* Never read here: a server that speaks first (an SSH banner) keeps its bytes in the socket. */
  attempt.fd = fd;
  *d = attempt;
  if (rc == 0) dial_done(d);
}

static void bring_loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fatal("socket for the loopback interface");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) fatal("reading the loopback interface's flags");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) fatal("bringing the loopback interface up");
  close(s);
}

int main(int argc, char **argv) {
  const char *channel_env = getenv("NODE_CHANNEL_FD");
  char *end;
  long port = argc == 2 ? strtol(argv[1], &end, 10) : 0;
  if (argc != 2 || *end != '\0' || port < 1 || port > 65535) {
    /* The Node agent's words: the supervisor logs them as the sandbox's. Usage: sandgate-netns PROXY_PORT. */
    fprintf(stderr, "sandgate netns agent: bad proxy port %s\n", argc > 1 ? argv[1] : "(none)");
    return 1;
  }
  if (!channel_env) {
    fputs("sandgate netns agent: no IPC channel: this program is started by the supervisor\n", stderr);
    return 1;
  }
  channel = atoi(channel_env);
  /* Blocking: each line is one small write; reads come only after poll says there is data. */
  int flags = fcntl(channel, F_GETFL);
  if (flags < 0 || fcntl(channel, F_SETFL, flags & ~O_NONBLOCK) < 0) fatal("the IPC channel (NODE_CHANNEL_FD)");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) fatal("PR_SET_PDEATHSIG");
  if (unshare(CLONE_NEWNET) < 0) fatal("entering a new network namespace");
  bring_loopback_up();

  int server = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (server < 0) fatal("socket for the egress proxy");
  int one = 1;
  setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
  if (bind(server, (struct sockaddr *)&at, sizeof at) < 0) fatal("binding 127.0.0.1:PROXY_PORT");
  if (listen(server, 511) < 0) fatal("listening on 127.0.0.1:PROXY_PORT");
  char ready[160];
  snprintf(ready, sizeof ready, "{\"cmd\":\"NODE_HANDLE\",\"type\":\"net.Server\",\"msg\":{\"op\":\"ready\",\"port\":%ld}}\n", port);
  send_line(ready, server);

  for (int i = 0; i < MAX_DIALS; i++) dials[i].fd = -1;
  static char buf[LINE_MAX_BYTES];
  size_t have = 0;
  for (;;) {
    struct pollfd fds[MAX_DIALS + 1];
    struct dial *of[MAX_DIALS + 1];
    int n = 0;
    long long wait = -1, now = now_ms();
    fds[n++] = (struct pollfd){.fd = channel, .events = POLLIN};
    for (int i = 0; i < MAX_DIALS; i++) {
      if (dials[i].fd < 0) continue;
      long long left = dials[i].deadline - now;
      if (left <= 0) {
        close(dials[i].fd);
        dials[i].fd = -1;
        dial_failed(&dials[i], ETIMEDOUT);
        continue;
      }
      if (wait < 0 || left < wait) wait = left;
      of[n] = &dials[i];
      fds[n++] = (struct pollfd){.fd = dials[i].fd, .events = POLLOUT};
    }
    if (poll(fds, (nfds_t)n, (int)wait) < 0) {
      if (errno == EINTR) continue;
      fatal("poll");
    }
    for (int i = 1; i < n; i++) {
      if (!fds[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof err;
      if (getsockopt(of[i]->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
      if (err == 0) {
        dial_done(of[i]);
      } else {
        close(of[i]->fd);
        of[i]->fd = -1;
        dial_failed(of[i], err);
      }
    }
    if (!fds[0].revents) continue;
    ssize_t got = read(channel, buf + have, sizeof buf - 1 - have);
    if (got == 0) return 0; /* the supervisor closed the channel: its agent goes with it */
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fatal("reading from the supervisor");
    }
    have += (size_t)got;
    buf[have] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n'))) {
      *nl = '\0';
      /* Node's own messages (NODE_HANDLE_ACK for each socket handed over) need no answer. */
      if (json_string_is(line, "op", "dial")) start_dial(line);
      line = nl + 1;
    }
    have = (size_t)(buf + have - line);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0; /* a line longer than any the supervisor writes */
  }
}
