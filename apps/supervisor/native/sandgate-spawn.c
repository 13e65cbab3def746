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
 * The child is reaped here and nowhere else: libuv waits only for the processes it started. Its
 * exit is seen through a pidfd polled on the event loop (uv_poll), so nothing blocks and no thread
 * waits; the poll handle does not keep the loop alive (the caller's sockets do, while referenced).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
  napi_valuetype callback_type;
  napi_typeof(env, args[4], &callback_type);
  if (callback_type != napi_function) {
    napi_throw_type_error(env, NULL, "sandgate-spawn: onExit must be a function");
    return NULL;
  }

  napi_value ret = NULL;
  char *file = NULL, **argv = NULL, **envp = NULL;
  int pairs[MAX_STDIO][2];
  uint32_t made = 0;
  int pidfd = -1, err;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  int actions_ready = 0, attr_ready = 0;

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
  if ((err = posix_spawnattr_init(&attr)) != 0) {
    throw_errno(env, "posix_spawnattr_init", err);
    goto out;
  }
  attr_ready = 1;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid;
  if ((err = posix_spawn(&pid, file, &actions, &attr, argv, envp)) != 0) {
    throw_errno(env, file, err);
    goto out;
  }
  /* Our own child, not reaped by anyone else: its pid stays valid for pidfd_open until we reap it. */
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    err = errno;
    end_child(pid);
    throw_errno(env, "pidfd_open", err);
    goto out;
  }

  waiter *w = calloc(1, sizeof *w);
  uv_loop_t *loop;
  napi_value resource_name;
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
    goto out;
  }
  uv_unref((uv_handle_t *)&w->poll);
  napi_create_reference(env, args[4], 1, &w->on_exit);
  napi_create_string_utf8(env, "sandgate-spawn", NAPI_AUTO_LENGTH, &resource_name);
  napi_async_init(env, NULL, resource_name, &w->async);

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
  if (attr_ready) posix_spawnattr_destroy(&attr);
  free(file);
  free_vector(argv);
  free_vector(envp);
  return ret;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value fn;
  if (napi_create_function(env, "spawn", NAPI_AUTO_LENGTH, spawn_child, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "spawn", fn) != napi_ok) return NULL;
  return exports;
}
