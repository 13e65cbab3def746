/*
 * sandgate-launch: the confining wrapper of every workload process in one execve (issue 16).
 *
 *   sandgate-launch NETNS UID GID CGROUP_DIRS -- K=V... -- ARGV...
 *
 * Does, in this order, what apps/supervisor/src/workload/launcher.ts's shell chain (bash, nsenter,
 * setpriv, env -i) does in four: sets every signal to its default disposition and blocks none;
 * closes every descriptor above 2 (node-pty's terminal masters are
 * not close-on-exec); joins each cgroup directory of CGROUP_DIRS (':'-separated, may be empty)
 * before anything can fork; raises its oom_score_adj to 500; enters the network namespace NETNS
 * ('' = stay); drops to UID/GID with no supplementary groups (real, effective and saved ids, so
 * there is no way back) and sets no_new_privs; then execs ARGV with exactly the environment K=V...
 * (ARGV[0] looked up in that environment's PATH, as env(1) does).
 *
 * The process keeps its pid through the exec, so process groups, PTY sessions, signals and exit
 * statuses are the command's own. It runs as root with the supervisor's minimal environment and
 * reads nothing from the workload's. Exit statuses: 125 when confinement failed (the command never
 * runs), 126 when the command cannot be executed, 127 when it is not found (env's conventions).
 * Every step is checked; any failure ends the process before the exec.
 *
 *   sandgate-launch --spare        (descriptor 3: CWD NUL NETNS NUL UID NUL ... ARGV NUL, then EOF)
 *
 * The spare form is started ahead of need (apps/supervisor/src/workload/spare.ts), so an exec does
 * not pay for a fork of the supervisor's large process: it waits on descriptor 3 for the same
 * arguments, NUL-terminated and preceded by the working directory, enters that directory, and goes
 * on exactly as above. EOF before any byte (the supervisor is gone, or retired it) ends it with 0.
 *
 * Built by apps/supervisor/native/build.sh at `npm install` (Debian's C compiler, static).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXIT_CONFINE_FAILED 125
/* The spare form's arguments at most: the kernel's own limit on an exec's arguments and environment. */
#define SPARE_SPEC_MAX (2 * 1024 * 1024)
#define SPARE_ARGS_MAX 65536
#define WORKLOAD_OOM_SCORE_ADJ "500"

extern char **environ;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "sandgate: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "", strerror(errno));
  _exit(EXIT_CONFINE_FAILED);
}

static void usage(void) {
  fputs("usage: sandgate-launch NETNS UID GID CGROUP_DIRS -- K=V... -- ARGV...\n", stderr);
  _exit(EXIT_CONFINE_FAILED);
}

/*
 * Every signal at its default disposition, none blocked: an ignored signal stays ignored across
 * exec, and the command must not inherit how it was started. Node's spawn leaves none ignored; a
 * spare started through glibc's posix_spawn (native-spawn.ts) has glibc's two internal signals
 * (32, 33) ignored, which glibc's own sigaction cannot reset: hence the raw system call, for 1..64.
 */
static void reset_signals(void) {
  struct {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
  } dfl = {SIG_DFL, 0, NULL, 0};
  for (int sig = 1; sig <= 64; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    if (syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask) != 0) die("cannot reset a signal's disposition", NULL);
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) die("cannot unblock signals", NULL);
}

/* A decimal id, whole and in range; anything else is a usage error. */
static unsigned parse_id(const char *s) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0 || v > 0xfffffffeUL || s[0] == '-') usage();
  return (unsigned)v;
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open", path);
  size_t len = strlen(text);
  if (write(fd, text, len) != (ssize_t)len) die("cannot write", path);
  if (close(fd) != 0) die("cannot write", path);
}

static void close_inherited_descriptors(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  /* Older kernels: every descriptor /proc lists, except the listing's own. */
  DIR *d = opendir("/proc/self/fd");
  if (!d) die("cannot list", "/proc/self/fd");
  int own = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != own) close(fd);
  }
  closedir(d);
}

static void join_cgroups(char *dirs) {
  char pid[32], path[4096];
  snprintf(pid, sizeof pid, "%d", getpid());
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (snprintf(path, sizeof path, "%s/cgroup.procs", d) >= (int)sizeof path) {
      errno = ENAMETOOLONG;
      die("cannot join the workload cgroup", d);
    }
    write_file(path, pid);
  }
}

static void enter_netns(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open the network namespace", path);
  if (setns(fd, CLONE_NEWNET) != 0) die("cannot enter the network namespace", path);
  close(fd);
}

static void drop_to(uid_t uid, gid_t gid) {
  if (setgroups(0, NULL) != 0) die("cannot clear supplementary groups", NULL);
  if (setresgid(gid, gid, gid) != 0) die("cannot set the group id", NULL);
  if (setresuid(uid, uid, uid) != 0) die("cannot set the user id", NULL);
  uid_t r, e, s;
  gid_t gr, ge, gs;
  if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid) die("user id not dropped", NULL);
  if (getresgid(&gr, &ge, &gs) != 0 || gr != gid || ge != gid || gs != gid) die("group id not dropped", NULL);
  if (getgroups(0, NULL) != 0) die("supplementary groups not cleared", NULL);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("cannot set no_new_privs", NULL);
}

/*
 * The spare form: reads descriptor 3 to EOF and returns the argv it carries (argv[0] kept, then the
 * fields after CWD), after entering CWD. Exits 0 on an empty read (retired), 125 on anything else
 * malformed.
 */
static char **read_spare_spec(char *self, int *argc_out) {
  static char spec[SPARE_SPEC_MAX];
  static char *args[SPARE_ARGS_MAX + 2];
  size_t len = 0;
  for (;;) {
    if (len == sizeof spec) {
      errno = E2BIG;
      die("spare launch spec too long", NULL);
    }
    ssize_t n = read(3, spec + len, sizeof spec - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot read the spare launch spec", NULL);
    if (n == 0) break;
    len += (size_t)n;
  }
  if (len == 0) _exit(0);
  if (spec[len - 1] != '\0') usage();
  int argc = 0;
  args[argc++] = self;
  const char *cwd = spec;
  for (size_t at = strlen(spec) + 1; at < len; at += strlen(spec + at) + 1) {
    if (argc > SPARE_ARGS_MAX) {
      errno = E2BIG;
      die("spare launch spec has too many fields", NULL);
    }
    args[argc++] = spec + at;
  }
  args[argc] = NULL;
  /* As Node's spawn would, before anything else and as root (the supervisor checked it as the workload). */
  if (chdir(cwd) != 0) die("cannot enter the working directory", cwd);
  *argc_out = argc;
  return args;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--spare") == 0) argv = read_spare_spec(argv[0], &argc);
  /* NETNS UID GID CGROUP_DIRS -- at least, then the environment up to the second --, then ARGV. */
  if (argc < 8 || strcmp(argv[5], "--") != 0) usage();
  int env_start = 6, argv_start = -1;
  for (int i = env_start; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      argv_start = i + 1;
      break;
    }
    if (strchr(argv[i], '=') == NULL || argv[i][0] == '=') usage();
  }
  if (argv_start < 0 || argv_start >= argc) usage();
  uid_t uid = parse_id(argv[2]);
  gid_t gid = parse_id(argv[3]);

  reset_signals();
  close_inherited_descriptors();
  join_cgroups(argv[4]);
  write_file("/proc/self/oom_score_adj", WORKLOAD_OOM_SCORE_ADJ);
  if (argv[1][0] != '\0') enter_netns(argv[1]);
  drop_to(uid, gid);

  /* The workload's environment, exactly: the argv slots between the two -- markers. */
  argv[argv_start - 1] = NULL;
  environ = &argv[env_start];
  execvp(argv[argv_start], &argv[argv_start]);
  int err = errno;
  fprintf(stderr, "sandgate-launch: %s: %s\n", argv[argv_start], strerror(err));
  _exit(err == ENOENT ? 127 : 126);
}
