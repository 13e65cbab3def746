/*
 * sandgate-spawn: starts a process from the supervisor without forking it (a Node addon).
 *
 * Node's child_process.spawn forks the calling process and returns only once the child has
 * exec'd: the supervisor's event loop waits while the kernel copies the page tables of its tens of
 * MiB and the child tears them down again. BENCHMARKS.md ("What a spawn costs a Node process")
 * measured 7 ms of a supervisor-like process's event loop per spawn on the project's machine,
 * against ~2 ms for a whole spawn from a small native process. glibc's posix_spawn starts the
 * child with clone(CLONE_VM | CLONE_VFORK): nothing is copied, whatever the caller's size.
 *
 * spawn(file, argv, envp, stdioCount, onExit) -> { pid, fds }
 *   The child runs `file` (an absolute path) with `argv` and exactly `envp` ("K=V" strings), in a
 *   session and process group of its own (as Node's `detached: true`), with every signal at its
 *   default disposition and none blocked (as libuv's child set-up), and its descriptors 0 ..
 *   stdioCount-1 each one end of a fresh socket pair (as Node's stdio 'pipe'); `fds` are the other
 *   ends, for the caller to wrap in net.Socket. Every other descriptor of the supervisor is
 *   close-on-exec (libuv and Node open all of theirs so), so the child inherits none of them.
 *   onExit(code, signal) is called once, on the event loop, when the child has exited and been
 *   reaped: exactly one of the two is a number, the other null.
 *   Throws (with errno's message) if the child could not be started; then nothing is left open.
 *
 * spawnPty(file, argv, envp, cwd, cols, rows, onExit) -> { pid, fd }
 *   The same start, on a terminal instead of pipes: a fresh pseudo-terminal of cols x rows with
 *   node-pty's line settings, its slave opened as the child's descriptors 0-2 after the child's
 *   setsid (so it is the child's controlling terminal, as node-pty's forked child makes it), in
 *   `cwd`. `fd` is the master, non-blocking and close-on-exec, for the caller to read and write;
 *   this process never holds the slave, so reading the master ends (EIO) once every process of
 *   the terminal closed it. onExit as for spawn.
 * resizePty(fd, cols, rows): sets the terminal's size (the kernel signals SIGWINCH to its
 *   foreground group).
 * trimMemory() -> boolean: glibc's malloc_trim(0), which gives the free pages inside the C heap
 *   back to the kernel (glibc itself only ever returns the heap's top). True if any were.
 *
 * The child is reaped here and nowhere else: libuv waits only for the processes it started. Its
 * exit is seen through a pidfd polled on the event loop (uv_poll), so nothing blocks and no thread
 * waits; the poll handle does not keep the loop alive (the caller's sockets do, while referenced).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <node_api.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <uv.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define MAX_STDIO 8

typedef struct {
  uv_poll_t poll;
  int pidfd;
  pid_t pid;
  napi_env env;
  napi_ref on_exit;
  napi_async_context async;
} waiter;

#define CHECK(call)                                                                         \
  do {                                                                                      \
    if ((call) != napi_ok) {                                                                \
      napi_throw_error(env, NULL, "sandgate-spawn: N-API call failed: " #call);            \
      return NULL;                                                                          \
    }                                                                                       \
  } while (0)

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[256];
  snprintf(msg, sizeof msg, "sandgate-spawn: %s: %s", what, strerror(err));
  napi_value code, message, error;
  napi_create_string_utf8(env, strerror(err), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_value errno_value;
  napi_create_int32(env, err, &errno_value);
  napi_set_named_property(env, error, "errno", errno_value);
  napi_throw(env, error);
  return NULL;
}

/* A JS string as a malloc'd C string; NULL (with an exception pending) if it is not a string. */
static char *string_arg(napi_env env, napi_value value) {
  size_t len;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "sandgate-spawn: expected a string");
    return NULL;
  }
  char *s = malloc(len + 1);
  if (!s) return NULL;
  napi_get_value_string_utf8(env, value, s, len + 1, &len);
  return s;
}

/* A JS array of strings as a NULL-terminated vector; NULL (exception pending) on a bad element. */
static char **string_vector(napi_env env, napi_value array) {
  uint32_t n;
  if (napi_get_array_length(env, array, &n) != napi_ok) {
    napi_throw_type_error(env, NULL, "sandgate-spawn: expected an array of strings");
    return NULL;
  }
  char **v = calloc(n + 1, sizeof *v);
  if (!v) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value element;
    napi_get_element(env, array, i, &element);
    if (!(v[i] = string_arg(env, element))) {
      for (uint32_t j = 0; j < i; j++) free(v[j]);
      free(v);
      return NULL;
    }
  }
  return v;
}

static void free_vector(char **v) {
  if (!v) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

static void on_closed(uv_handle_t *handle) { free(handle->data); }

/* A child whose exit cannot be watched is not left running: killed and reaped at once. */
static void end_child(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

static void on_readable(uv_poll_t *poll, int status, int events) {
  (void)events;
  waiter *w = poll->data;
  siginfo_t info;
  memset(&info, 0, sizeof info);
  if (status == 0) {
    if (waitid(P_PIDFD, w->pidfd, &info, WEXITED | WNOHANG) == 0 && info.si_pid == 0) return; /* not yet */
  } else {
    /* The watch itself failed (never seen): the child is ended rather than left unwatched. */
    kill(w->pid, SIGKILL);
    while (waitid(P_PIDFD, w->pidfd, &info, WEXITED) != 0 && errno == EINTR) {
    }
  }
  uv_poll_stop(poll);
  close(w->pidfd);
  napi_env env = w->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value code, signal, callback, global, result;
  napi_get_null(env, &code);
  napi_get_null(env, &signal);
  if (info.si_code == CLD_EXITED) napi_create_int32(env, info.si_status, &code);
  else if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) napi_create_int32(env, info.si_status, &signal);
  else napi_create_int32(env, SIGKILL, &signal); /* no status to be had: reported as killed */
  napi_get_reference_value(env, w->on_exit, &callback);
  napi_get_global(env, &global);
  napi_value argv[2] = {code, signal};
  napi_make_callback(env, w->async, global, callback, 2, argv, &result);
  napi_delete_reference(env, w->on_exit);
  napi_async_destroy(env, w->async);
  napi_close_handle_scope(env, scope);
  uv_close((uv_handle_t *)poll, on_closed);
}

/*
 * posix_spawn with what every child gets: a session and process group of its own, every signal at
 * its default disposition, none blocked. glibc's child does the setsid before the file actions,
 * so a terminal they open is the child's controlling terminal. Returns 0 or an errno value.
 */
static int spawn_in_session(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions, char **argv, char **envp) {
  posix_spawnattr_t attr;
  int err = posix_spawnattr_init(&attr);
  if (err != 0) return err;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  err = posix_spawn(pid, file, actions, &attr, argv, envp);
  posix_spawnattr_destroy(&attr);
  return err;
}

/*
 * Watches the exit of `pid` (our child, not yet reaped) on the event loop and calls on_exit then.
 * Returns 0; on failure the child is killed and reaped, an exception is pending, and -1 returned.
 */
static int watch_exit(napi_env env, pid_t pid, napi_value on_exit) {
  /* Our own child, not reaped by anyone else: its pid stays valid for pidfd_open until we reap it. */
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    int err = errno;
    end_child(pid);
    throw_errno(env, "pidfd_open", err);
    return -1;
  }
  waiter *w = calloc(1, sizeof *w);
  uv_loop_t *loop;
  int polling = w && napi_get_uv_event_loop(env, &loop) == napi_ok && uv_poll_init(loop, &w->poll, pidfd) == 0;
  if (polling) {
    w->poll.data = w;
    w->pidfd = pidfd;
    w->pid = pid;
    w->env = env;
  }
  if (!polling || uv_poll_start(&w->poll, UV_READABLE, on_readable) != 0) {
    end_child(pid);
    close(pidfd);
    if (polling) uv_close((uv_handle_t *)&w->poll, on_closed); /* frees w once closed */
    else free(w);
    napi_throw_error(env, NULL, "sandgate-spawn: cannot watch the child's exit");
    return -1;
  }
  uv_unref((uv_handle_t *)&w->poll);
  napi_value resource_name;
  napi_create_reference(env, on_exit, 1, &w->on_exit);
  napi_create_string_utf8(env, "sandgate-spawn", NAPI_AUTO_LENGTH, &resource_name);
  napi_async_init(env, NULL, resource_name, &w->async);
  return 0;
}

/* 1 if `value` is a function; 0 with a TypeError pending otherwise. */
static int require_on_exit(napi_env env, napi_value value) {
  napi_valuetype type;
  if (napi_typeof(env, value, &type) == napi_ok && type == napi_function) return 1;
  napi_throw_type_error(env, NULL, "sandgate-spawn: onExit must be a function");
  return 0;
}

static napi_value spawn_child(napi_env env, napi_callback_info cbinfo) {
  size_t argc = 5;
  napi_value args[5];
  CHECK(napi_get_cb_info(env, cbinfo, &argc, args, NULL, NULL));
  if (argc < 5) {
    napi_throw_type_error(env, NULL, "sandgate-spawn: spawn(file, argv, envp, stdioCount, onExit)");
    return NULL;
  }
  uint32_t stdio_count;
  if (napi_get_value_uint32(env, args[3], &stdio_count) != napi_ok || stdio_count > MAX_STDIO) {
    napi_throw_range_error(env, NULL, "sandgate-spawn: stdioCount must be 0 to 8");
    return NULL;
  }
  if (!require_on_exit(env, args[4])) return NULL;

  napi_value ret = NULL;
  char *file = NULL, **argv = NULL, **envp = NULL;
  int pairs[MAX_STDIO][2];
  uint32_t made = 0;
  int err;
  posix_spawn_file_actions_t actions;
  int actions_ready = 0;

  if (!(file = string_arg(env, args[0])) || !(argv = string_vector(env, args[1])) || !(envp = string_vector(env, args[2]))) goto out;
  for (; made < stdio_count; made++) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[made]) != 0) {
      throw_errno(env, "socketpair", errno);
      goto out;
    }
  }
  if ((err = posix_spawn_file_actions_init(&actions)) != 0) {
    throw_errno(env, "posix_spawn_file_actions_init", err);
    goto out;
  }
  actions_ready = 1;
  /* dup2 of a descriptor onto its own number clears close-on-exec too (glibc >= 2.29). */
  for (uint32_t i = 0; i < stdio_count; i++) {
    if ((err = posix_spawn_file_actions_adddup2(&actions, pairs[i][1], (int)i)) != 0) {
      throw_errno(env, "posix_spawn_file_actions_adddup2", err);
      goto out;
    }
  }
  pid_t pid;
  if ((err = spawn_in_session(&pid, file, &actions, argv, envp)) != 0) {
    throw_errno(env, file, err);
    goto out;
  }
  if (watch_exit(env, pid, args[4]) != 0) goto out;

  napi_value result, pid_value, fds;
  napi_create_object(env, &result);
  napi_create_int32(env, pid, &pid_value);
  napi_set_named_property(env, result, "pid", pid_value);
  napi_create_array_with_length(env, stdio_count, &fds);
  for (uint32_t i = 0; i < stdio_count; i++) {
    napi_value fd;
    close(pairs[i][1]);
    napi_create_int32(env, pairs[i][0], &fd);
    napi_set_element(env, fds, i, fd);
  }
  napi_set_named_property(env, result, "fds", fds);
  made = 0; /* handed over: the caller owns the parent ends, the child ends are closed */
  ret = result;

out:
  for (uint32_t i = 0; i < made; i++) {
    close(pairs[i][0]);
    close(pairs[i][1]);
  }
  if (actions_ready) posix_spawn_file_actions_destroy(&actions);
  free(file);
  free_vector(argv);
  free_vector(envp);
  return ret;
}

/* A terminal size argument: 1 .. 65535 (what struct winsize holds), or 0 on anything else. */
static unsigned short size_arg(napi_env env, napi_value value) {
  uint32_t n;
  if (napi_get_value_uint32(env, value, &n) != napi_ok || n < 1 || n > 65535) return 0;
  return (unsigned short)n;
}

/*
 * The line settings node-pty gives a new terminal (so a shell behaves the same on either): the
 * kernel's defaults plus UTF-8 line editing, any key restarting output, and a bell on a full line.
 */
static void set_line_settings(int master) {
  struct termios t;
  if (tcgetattr(master, &t) != 0) return;
  t.c_iflag = ICRNL | IXON | IXANY | IMAXBEL | BRKINT | IUTF8;
  t.c_oflag = OPOST | ONLCR;
  t.c_cflag = CREAD | CS8 | HUPCL;
  t.c_lflag = ICANON | ISIG | IEXTEN | ECHO | ECHOE | ECHOK | ECHOKE | ECHOCTL;
  cfsetispeed(&t, B38400);
  cfsetospeed(&t, B38400);
  tcsetattr(master, TCSANOW, &t);
}

static napi_value spawn_pty(napi_env env, napi_callback_info cbinfo) {
  size_t argc = 7;
  napi_value args[7];
  CHECK(napi_get_cb_info(env, cbinfo, &argc, args, NULL, NULL));
  if (argc < 7) {
    napi_throw_type_error(env, NULL, "sandgate-spawn: spawnPty(file, argv, envp, cwd, cols, rows, onExit)");
    return NULL;
  }
  struct winsize size = {.ws_col = size_arg(env, args[4]), .ws_row = size_arg(env, args[5])};
  if (size.ws_col == 0 || size.ws_row == 0) {
    napi_throw_range_error(env, NULL, "sandgate-spawn: cols and rows must be 1 to 65535");
    return NULL;
  }
  if (!require_on_exit(env, args[6])) return NULL;

  napi_value ret = NULL;
  char *file = NULL, *cwd = NULL, **argv = NULL, **envp = NULL;
  char slave[128];
  int master = -1, err;
  posix_spawn_file_actions_t actions;
  int actions_ready = 0;

  if (!(file = string_arg(env, args[0])) || !(argv = string_vector(env, args[1])) || !(envp = string_vector(env, args[2])) ||
      !(cwd = string_arg(env, args[3])))
    goto out;
  master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) {
    throw_errno(env, "posix_openpt", errno);
    goto out;
  }
  if (grantpt(master) != 0 || unlockpt(master) != 0) {
    throw_errno(env, "cannot set up the pseudo-terminal", errno);
    goto out;
  }
  if ((err = ptsname_r(master, slave, sizeof slave)) != 0) {
    throw_errno(env, "cannot name the pseudo-terminal", err);
    goto out;
  }
  /* The master's termios requests reach the slave's settings (Linux). */
  set_line_settings(master);
  if (ioctl(master, TIOCSWINSZ, &size) != 0 || fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK) != 0) {
    throw_errno(env, "cannot set up the pseudo-terminal", errno);
    goto out;
  }
  if ((err = posix_spawn_file_actions_init(&actions)) != 0) {
    throw_errno(env, "posix_spawn_file_actions_init", err);
    goto out;
  }
  actions_ready = 1;
  /* In the child, after its setsid: opened without O_NOCTTY, the slave becomes its controlling terminal. */
  if ((err = posix_spawn_file_actions_addchdir_np(&actions, cwd)) != 0 ||
      (err = posix_spawn_file_actions_addopen(&actions, 0, slave, O_RDWR, 0)) != 0 ||
      (err = posix_spawn_file_actions_adddup2(&actions, 0, 1)) != 0 || (err = posix_spawn_file_actions_adddup2(&actions, 0, 2)) != 0) {
    throw_errno(env, "posix_spawn_file_actions", err);
    goto out;
  }
  pid_t pid;
  if ((err = spawn_in_session(&pid, file, &actions, argv, envp)) != 0) {
    throw_errno(env, "cannot start the process on its terminal", err);
    goto out;
  }
  if (watch_exit(env, pid, args[6]) != 0) goto out;

  napi_value result, pid_value, fd_value;
  napi_create_object(env, &result);
  napi_create_int32(env, pid, &pid_value);
  napi_set_named_property(env, result, "pid", pid_value);
  napi_create_int32(env, master, &fd_value);
  napi_set_named_property(env, result, "fd", fd_value);
  master = -1; /* handed over */
  ret = result;

out:
  if (master >= 0) close(master);
  if (actions_ready) posix_spawn_file_actions_destroy(&actions);
  free(file);
  free(cwd);
  free_vector(argv);
  free_vector(envp);
  return ret;
}

static napi_value resize_pty(napi_env env, napi_callback_info cbinfo) {
  size_t argc = 3;
  napi_value args[3];
  CHECK(napi_get_cb_info(env, cbinfo, &argc, args, NULL, NULL));
  int32_t fd;
  struct winsize size = {.ws_col = argc == 3 ? size_arg(env, args[1]) : 0, .ws_row = argc == 3 ? size_arg(env, args[2]) : 0};
  if (argc < 3 || napi_get_value_int32(env, args[0], &fd) != napi_ok || size.ws_col == 0 || size.ws_row == 0) {
    napi_throw_range_error(env, NULL, "sandgate-spawn: resizePty(fd, cols, rows), cols and rows 1 to 65535");
    return NULL;
  }
  if (ioctl(fd, TIOCSWINSZ, &size) != 0) return throw_errno(env, "resizePty", errno);
  return NULL;
}

static napi_value trim_memory(napi_env env, napi_callback_info cbinfo) {
  (void)cbinfo;
  napi_value released;
  CHECK(napi_get_boolean(env, malloc_trim(0) == 1, &released));
  return released;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  const struct {
    const char *name;
    napi_callback fn;
  } functions[] = {{"spawn", spawn_child}, {"spawnPty", spawn_pty}, {"resizePty", resize_pty}, {"trimMemory", trim_memory}};
  for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
    napi_value fn;
    if (napi_create_function(env, functions[i].name, NAPI_AUTO_LENGTH, functions[i].fn, NULL, &fn) != napi_ok) return NULL;
    if (napi_set_named_property(env, exports, functions[i].name, fn) != napi_ok) return NULL;
  }
  return exports;
}
