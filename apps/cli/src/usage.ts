// Help texts. Kept apart from the commands so `--help` loads nothing else.
const GLOBAL_FLAGS = `Global flags (also after the command):
  --gateway URL   gateway endpoint (env SANDGATE_GATEWAY, else the client config
                  file's, else 127.0.0.1:8080); host:port or http://host:port
                  (plaintext unless --ca), https://host:port or grpcs:// (TLS)
  --token T       API token, sent as authorization: Bearer (env SANDGATE_TOKEN)
  --ca FILE       PEM CA of the gateway's certificate (env SANDGATE_CA; an https
                  gateway without one trusts the system's CAs)
  --client-cert FILE, --client-key FILE
                  mTLS client certificate and key (env SANDGATE_CLIENT_CERT/_KEY)
  --tls-server-name N
                  name to check the gateway's certificate for (env SANDGATE_TLS_SERVER_NAME)
  -h, --help      show help
Unset ones come from the client config file ~/.config/sandgate/config.json
(SANDGATE_CONFIG elsewhere), which 'sandgate up' writes.`;

export const USAGE: Record<string, string> = {
  '': `sandgate: a multi-replica sandbox gateway

Usage:
  sandgate up [flags]                  run a gateway, its workers and a private Redis (one process)
  sandgate gateway [flags]             run one gateway replica
  sandgate worker [flags]              run only the durable job workers (beside --no-workers replicas)
  sandgate sandbox create [flags] [-- CMD...]
  sandgate sandbox get NAME [-o json]
  sandgate sandbox list [-o json] [--selector k=v,...] [--limit N] [--workspace W | --all-workspaces]
  sandgate sandbox delete NAME...
  sandgate sandbox exec NAME [flags] -- CMD...
  sandgate sandbox connect NAME        attach to the main process (replayed and live output)
  sandgate sandbox stop NAME           stop it, keeping its files
  sandgate sandbox start NAME          start a stopped sandbox again
  sandgate sandbox ssh-config NAME     print an OpenSSH Host block for ssh, scp, sftp
  sandgate sandbox upload NAME LOCAL [REMOTE]    copy a file or directory into the sandbox
  sandgate sandbox download NAME REMOTE [LOCAL]  copy a file or directory out of it
  sandgate sandbox policy NAME [flags] the policy in force, or --policy FILE to replace it live
  sandgate ssh-proxy [flags]           OpenSSH ProxyCommand over ForwardTcp
  sandgate forward start NAME LOCAL_PORT[:REMOTE_PORT]  a local port to a port in the sandbox
  sandgate logs NAME [flags]           the sandbox's log lines (--follow to keep reading)
  sandgate workspace create NAME [--label k=v]...
  sandgate workspace get NAME [-o json]
  sandgate workspace list [-o json]
  sandgate workspace delete NAME...
  sandgate workspace member add|remove|list --workspace WS [flags]
  sandgate whoami [-o json]            who the gateway takes you for (GetCurrentUser)
  sandgate token create --workspace W [flags]  a new API token (printed once, on stdout)
  sandgate token list [-o json]        the API tokens (never the tokens themselves)
  sandgate token revoke ID|TOKEN       revoke an API token (refused everywhere within 1 s)
  sandgate service expose SANDBOX TARGET-PORT [SERVICE]  serve a port of the sandbox at a URL
  sandgate service list [SANDBOX]      exposed services and their URLs
  sandgate service get SANDBOX [SERVICE]
  sandgate service delete SANDBOX [SERVICE]
  sandgate service url SANDBOX [SERVICE] [--expires 1h]  a signed public link (no token needed)
  sandgate pool set NAME --size N [flags]  keep N started sandboxes of one template (admins)
  sandgate pool list [-o json]         the warm pools: size, ready and starting members
  sandgate pool delete NAME            delete a pool and its unclaimed members

${GLOBAL_FLAGS}
  --version       print the version

Run 'sandgate COMMAND --help' for a command's flags.
`,
  sandbox: `Usage:
  sandgate sandbox create [--name N] [--workspace W] [--detach] [--no-keep] [--restart-policy P] [--env K=V]... [--label k=v]... [--image I] [--tty] [--policy FILE] [--cpu C] [--memory M] [--disk D] [--pool NAME] [-o json] [-- CMD...]
  sandgate sandbox get NAME [--workspace W] [-o json]
  sandgate sandbox list [-o json] [--selector k=v,...] [--limit N] [--workspace W | --all-workspaces]
  sandgate sandbox delete NAME... [--workspace W]
  sandgate sandbox exec NAME [--workspace W] [--timeout SECS] [--tty] [--workdir D] [--env K=V]... -- CMD...
  sandgate sandbox connect NAME [--workspace W]
  sandgate sandbox stop NAME [--workspace W] [-o json]
  sandgate sandbox start NAME [--workspace W] [-o json]
  sandgate sandbox ssh-config NAME [--workspace W]
  sandgate sandbox upload NAME LOCAL [REMOTE] [--workspace W]
  sandgate sandbox download NAME REMOTE [LOCAL] [--workspace W]
  sandgate sandbox policy NAME [--workspace W] [--policy FILE] [-o json]

${GLOBAL_FLAGS}

Run 'sandgate sandbox COMMAND --help' for a command's flags.
`,
  'sandbox create': `Usage: sandgate sandbox create [flags] [-- CMD...]

Creates a sandbox running CMD (its main process) and waits until it is Ready
(up to SANDGATE_PROVISION_TIMEOUT seconds, default 300). Then, unless --detach, attaches to
the main process (its output from the start) and exits with its exit status.

Flags:
  --name N              sandbox name (default: generated by the gateway)
  --workspace W         create it in workspace W (default: your own; W's member or a gateway admin)
  --detach              do not attach to the main process; print the sandbox and return
  --no-keep             delete the sandbox once its main process finished (detached: the
                        gateway does it, durably)
  --restart-policy P    never, on-failure or always: restart the main process when it ends
  --env K=V             environment variable for the sandbox (repeatable)
  --label k=v           label (repeatable)
  --image I             image (template.image)
  --tty                 run the main process on a terminal
  --policy FILE         egress and identity policy: an OpenShell policy file (YAML or JSON:
                        network_policies: {NAME: {endpoints: [{host, port, ports, allowed_ips}]}},
                        process: {run_as_user, run_as_group}); without it no egress at all
  --cpu C               CPU limit: cores or millicores (2, 0.5, 500m; at least 10m)
  --memory M            memory limit: bytes or a quantity (256Mi, 1Gi, 512M; at least 16Mi)
  --disk D              size of the sandbox's disk (/sandbox): a quantity (1Gi, 500M; at least
                        64Mi; default 10Gi; local driver only)
  --pool NAME           claim a started sandbox of warm pool NAME (the annotation
                        sandgate.dev/pool; see 'sandgate pool list'); --image, --cpu, --memory and
                        --policy must be left out or equal the pool's. None ready: a cold start
                        of the pool's template
  -o json               print the sandbox as proto3 JSON (implies --detach)
${GLOBAL_FLAGS}
`,
  'sandbox policy': `Usage: sandgate sandbox policy NAME [--policy FILE] [-o json]

Without --policy, prints the sandbox's policy in force (GetSandboxConfig): its revision, hash and
content. With --policy FILE (the format of 'sandbox create --policy'), replaces it on the live
sandbox (UpdateConfig) and returns once the sandbox applied it: new connections follow it.
'process' and 'landlock' cannot change, filesystem paths can only be added.

Flags:
  --policy FILE   the new policy (YAML or JSON, OpenShell's policy file shape)
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the result as JSON
${GLOBAL_FLAGS}
`,
  'sandbox get': `Usage: sandgate sandbox get NAME [--workspace W] [-o json]

Flags:
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the sandbox as proto3 JSON (spec.policy and template.resources decoded)
${GLOBAL_FLAGS}
`,
  'sandbox list': `Usage: sandgate sandbox list [flags]

Flags:
  --selector k=v,...  only sandboxes with these labels
  --limit N           at most N sandboxes
  --workspace W       the sandboxes of workspace W (default: your own)
  --all-workspaces    the sandboxes of every workspace (gateway admins only)
  -o json             print {"sandboxes": [...]} as proto3 JSON
${GLOBAL_FLAGS}
`,
  'sandbox delete': `Usage: sandgate sandbox delete NAME... [--workspace W]

Deletes each named sandbox; exits 1 if any could not be deleted.

Flags:
  --workspace W   the sandboxes' workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'sandbox exec': `Usage: sandgate sandbox exec NAME [flags] -- CMD...

Runs CMD in the sandbox, streaming stdin, stdout and stderr; exits with CMD's exit status.

Flags:
  --timeout SECS  kill CMD after SECS seconds (exit status 124)
  --tty           run CMD on a terminal (raw mode when stdin is a terminal)
  --workdir D     working directory
  --env K=V       environment variable (repeatable)
  --workspace W   the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'sandbox connect': `Usage: sandgate sandbox connect NAME

Attaches to the sandbox's main process: its recent output is replayed, live output follows,
and the command exits with the main process's exit status once it ends. Ctrl-C detaches and
leaves the main process running.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'sandbox stop': `Usage: sandgate sandbox stop NAME [--workspace W] [-o json]

Stops the sandbox's main process and supervisor; its files are kept. Access granted for this
run (exec, SSH sessions) ends.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the sandbox as proto3 JSON
${GLOBAL_FLAGS}
`,
  'sandbox start': `Usage: sandgate sandbox start NAME [--workspace W] [-o json]

Starts a stopped sandbox again (a new run: new supervisor, new credentials) and waits until it
is Ready (up to SANDGATE_PROVISION_TIMEOUT seconds, default 300).

Flags:
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the sandbox as proto3 JSON
${GLOBAL_FLAGS}
`,
  whoami: `Usage: sandgate whoami [-o json]

Prints the identity the gateway authenticated this caller as (GetCurrentUser): subject, name,
provider (api_token, oidc, mtls or local_dev), roles and scopes. The credential is the one
every client command sends: SANDGATE_TOKEN as 'authorization: Bearer <token>'.

Flags:
  -o json         print {subject, display_name, identity_provider, roles, scopes}
${GLOBAL_FLAGS}
`,
  token: `Usage:
  sandgate token create --redis URL --workspace W [--role admin|member] [--ttl DURATION] [--name LABEL]
  sandgate token list --redis URL [-o json]
  sandgate token revoke --redis URL ID|TOKEN

API tokens authenticate callers of the gateway ('authorization: Bearer <token>'; the CLI sends
SANDGATE_TOKEN). These commands work on the Redis the replicas share, not through a gateway.

Run 'sandgate token COMMAND --help' for a command's flags.
`,
  'token create': `Usage: sandgate token create --workspace W [flags]

Creates an API token and prints it, and only it, on stdout (it is shown once: Redis keeps only
its SHA-256):  export SANDGATE_TOKEN=$(sandgate token create --workspace default --role admin)

Flags:
  --workspace W       the workspace the token belongs to (required; it must exist:
                      'default' always does, others come from 'sandgate workspace create')
  --role R            admin (every workspace, workspace management) or member (its own
                      workspace only); default member
  --ttl DURATION      lifetime, e.g. 30m, 12h, 7d, 1h30m (default: never expires)
  --name LABEL        a label shown by 'token list'
  --redis URL         the Redis the replicas share (SANDGATE_REDIS_URL, default
                      redis://127.0.0.1:6379)
  --redis-ca F        PEM CA of a rediss:// Redis (SANDGATE_REDIS_CA)
`,
  'token list': `Usage: sandgate token list [--redis URL] [-o json]

Lists the live API tokens: id, name, workspace, role, created, expires. Never the tokens.

Flags:
  -o json             print {"tokens": [{id, name, workspace, role, created, expires}]}
  --redis URL         the Redis the replicas share (SANDGATE_REDIS_URL, default
                      redis://127.0.0.1:6379)
  --redis-ca F        PEM CA of a rediss:// Redis (SANDGATE_REDIS_CA)
`,
  'token revoke': `Usage: sandgate token revoke [--redis URL] ID|TOKEN

Revokes an API token, named by its id (from 'token list') or by the token itself. Every
replica refuses it within a second.

Flags:
  --redis URL         the Redis the replicas share (SANDGATE_REDIS_URL, default
                      redis://127.0.0.1:6379)
  --redis-ca F        PEM CA of a rediss:// Redis (SANDGATE_REDIS_CA)
`,
  logs: `Usage: sandgate logs NAME [flags]

Prints the sandbox's log lines (gateway and sandbox sources), from any replica.

Flags:
  -f, --follow        keep printing new lines until the sandbox is deleted (Ctrl-C stops)
  -n, --lines N       start with the last N lines (1-2000, default 200)
  --source S          only lines from S: gateway or sandbox (repeatable)
  --workspace W       the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'sandbox ssh-config': `Usage: sandgate sandbox ssh-config NAME

Prints an OpenSSH Host block named sandgate-NAME whose ProxyCommand is 'sandgate ssh-proxy
--name NAME' against this gateway, so plain ssh, scp, sftp and editors can use it:

  sandgate sandbox ssh-config demo > demo.ssh && ssh -F demo.ssh sandgate-demo

Each connection mints a fresh SSH session token. Subsystem 'openshell-main' attaches to the
main process (ssh -tt -F demo.ssh -s sandgate-demo openshell-main; Ctrl-P Ctrl-Q detaches).

Flags:
  --workspace W   the sandbox's workspace (default: your own); passed on to ssh-proxy
${GLOBAL_FLAGS}
`,
  forward: `Usage:
  sandgate forward start NAME LOCAL_PORT[:REMOTE_PORT] [--bind ADDR] [--workspace W]

Run 'sandgate forward start --help' for its flags.
`,
  'forward start': `Usage: sandgate forward start NAME LOCAL_PORT[:REMOTE_PORT] [--bind ADDR] [--workspace W]

Listens on LOCAL_PORT (127.0.0.1 unless --bind) and carries every connection to REMOTE_PORT
(default: LOCAL_PORT) on the sandbox's loopback, over ForwardTcp through any replica. LOCAL_PORT
0 picks a free port. Prints where it listens; runs until Ctrl-C (or SIGTERM), which stops
listening, closes the live connections, revokes the SSH session tokens it minted and exits 0.

  sandgate forward start demo 8000            # localhost:8000 -> port 8000 in 'demo'
  sandgate forward start demo 9000:5432 --bind 0.0.0.0

Each connection counts against the gateway's ForwardTcp caps (SANDGATE_SSH_MAX_CONNECTIONS_PER_TOKEN,
_PER_SANDBOX); it mints one more session token per 3 concurrent connections.

Flags:
  --bind ADDR     local address to listen on (default 127.0.0.1)
  --workspace W   the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'sandbox upload': `Usage: sandgate sandbox upload NAME LOCAL [REMOTE]

Copies LOCAL into the sandbox through the gateway (no SSH or sftp-server needed). REMOTE is
absolute or relative to the sandbox's working directory (/sandbox); default: LOCAL's name there.
A file appears at REMOTE only complete (an interrupted upload leaves nothing). A directory is
sent as a tar and extracted into REMOTE. LOCAL - reads stdin (REMOTE required).
Paths with '..', or leading out of /sandbox and /tmp (symbolic links included), are refused.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'sandbox download': `Usage: sandgate sandbox download NAME REMOTE [LOCAL]

Copies REMOTE out of the sandbox through the gateway. A file is written to LOCAL (default:
REMOTE's name in the current directory; into it if LOCAL is a directory; - for stdout). A
directory arrives as a tar and is extracted into LOCAL (created if needed); entries that would
land outside LOCAL or write through a symbolic link are refused.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  'ssh-proxy': `Usage: sandgate ssh-proxy --sandbox-id ID --token TOKEN
       sandgate ssh-proxy --name NAME [--workspace W]

An OpenSSH ProxyCommand: pipes stdin and stdout to the sandbox's SSH server over ForwardTcp,
and exits when either side closes. With --name it mints a fresh SSH session (CreateSshSession)
for this connection and revokes it afterwards.

Flags:
  --sandbox-id ID   sandbox id (with --token)
  --token TOKEN     a CreateSshSession token for that sandbox
  --name NAME       sandbox name (mints the token itself)
  --workspace W     with --name: the sandbox's workspace (default: your own)
${GLOBAL_FLAGS}
`,
  workspace: `Usage:
  sandgate workspace create NAME [--label k=v]... [-o json]
  sandgate workspace get NAME [-o json]
  sandgate workspace list [--limit N] [--offset N] [--label-selector k=v,...] [-o json]
  sandgate workspace delete NAME...
  sandgate workspace member add --workspace WS --subject SUB --role user|admin
  sandgate workspace member remove --workspace WS --subject SUB
  sandgate workspace member list --workspace WS [--limit N] [--offset N] [-o json]

A workspace holds sandboxes; its members may use them. Creating and deleting workspaces needs a
gateway admin; adding and removing members needs a gateway admin or a workspace admin.

${GLOBAL_FLAGS}

Run 'sandgate workspace COMMAND --help' for a command's flags.
`,
  'workspace create': `Usage: sandgate workspace create NAME [--label k=v]... [-o json]

Creates a workspace (gateway admins only). NAME: at most 19 characters of a-z, 0-9 and '-'.

Flags:
  --name NAME     the name, instead of the NAME argument (as upstream's CLI takes it)
  --label k=v     label on the workspace (repeatable)
  -o json         print the workspace as JSON
${GLOBAL_FLAGS}
`,
  'workspace get': `Usage: sandgate workspace get NAME [-o json]

Flags:
  -o json         print the workspace as JSON
${GLOBAL_FLAGS}
`,
  'workspace list': `Usage: sandgate workspace list [flags]

Lists the workspaces you may use (every workspace for a gateway admin), oldest first.

Flags:
  --limit N                 at most N (default 100, at most 1000)
  --offset N                skip the first N
  --label-selector k=v,...  only workspaces with these labels
  -o json                   print {"workspaces": [...]} as JSON
${GLOBAL_FLAGS}
`,
  'workspace delete': `Usage: sandgate workspace delete NAME...

Deletes each workspace in turn (gateway admins only); stops at the first error. A workspace
that still holds sandboxes is refused (and stays Terminating until a later delete succeeds);
'default' cannot be deleted.

${GLOBAL_FLAGS}
`,
  'workspace member': `Usage: sandgate workspace member add --workspace WS --subject SUB --role user|admin
       sandgate workspace member remove --workspace WS --subject SUB
       sandgate workspace member list --workspace WS [--limit N] [--offset N] [-o json]

A member may use the workspace's sandboxes. SUB is the caller's subject: 'token:<id>' for an
API token, the OIDC 'sub', or a client certificate's CN. Only gateway admins grant 'admin'.

Flags:
  --workspace WS  the workspace (required)
  --subject SUB   the member's subject (add, remove)
  --role R        user or admin (add)
  --limit N       at most N members (list; default 100)
  --offset N      skip the first N (list)
  -o json         print the result as JSON
${GLOBAL_FLAGS}
`,
  gateway: `Usage: sandgate gateway [flags]

Runs one gateway replica until SIGTERM or SIGINT. Each flag can also be given by its
environment variable; flags win over the environment.

Flags:
  --host H                    listen address (SANDGATE_HOST, default 127.0.0.1)
  --grpc-port P               public gRPC port (SANDGATE_GRPC_PORT, default 8080; 0 = any)
  --http-port Q               HTTP port for /healthz, /readyz, /metrics (SANDGATE_HTTP_PORT, default 8081)
  --peer-port R               replica-to-replica port (SANDGATE_PEER_PORT, default 8082)
  --redis URL                 Redis URL (SANDGATE_REDIS_URL, default redis://127.0.0.1:6379):
                              redis://, rediss:// or redis+sentinel://H:P[,H:P…]/MASTER
  --replica-id ID             replica id (SANDGATE_REPLICA_ID, default HOSTNAME-PID-RANDOM)
  --driver local              compute driver (SANDGATE_DRIVER, default local)
  --state-dir DIR             sandbox state directory (SANDGATE_STATE_DIR, default ~/.local/state/sandgate)
  --supervisor-endpoint LIST  host:port list supervisors dial (SANDGATE_SUPERVISOR_ENDPOINT,
                              default this replica's gRPC address)
  --advertise-host H          host peers use to reach this replica (SANDGATE_ADVERTISE_HOST, default --host)
  --no-workers                do not run the background workers here (SANDGATE_WORKERS=0)
  --no-auth                   let every caller in as an admin, unauthenticated (SANDGATE_AUTH=0;
                              default: API tokens, plus OIDC and mTLS when configured)
  --oidc-issuer URL           accept this issuer's JWTs as bearer tokens (SANDGATE_OIDC_ISSUER)
  --oidc-audience A           the audience they must carry (SANDGATE_OIDC_AUDIENCE; required with
                              --oidc-issuer)
  -h, --help                  show help
`,
  worker: `Usage: sandgate worker [flags]

Runs only the durable job workers (deadlines, deletes, restarts, reconcile) until SIGTERM or
SIGINT, which lets running jobs finish first. For replicas started with --no-workers; any number
of workers may run. Flags and variables are those of 'sandgate gateway'.

Flags:
  --redis URL                 Redis URL (SANDGATE_REDIS_URL, default redis://127.0.0.1:6379):
                              redis://, rediss:// or redis+sentinel://H:P[,H:P…]/MASTER
  --worker-id ID              worker id (SANDGATE_WORKER_ID, default worker-HOSTNAME-PID-RANDOM)
  --driver local              compute driver, as on the replicas (SANDGATE_DRIVER, default local)
  --state-dir DIR             sandbox state directory, as on the replicas (SANDGATE_STATE_DIR)
  --supervisor-endpoint LIST  host:port list restarted supervisors dial, normally the load
                              balancer (SANDGATE_SUPERVISOR_ENDPOINT, required)
  --metrics-port P            serve /healthz, /readyz and /metrics on port P of SANDGATE_HOST's
                              address, plain HTTP (SANDGATE_WORKER_METRICS_PORT; 0 = a free port;
                              default: none, the worker listens on nothing)
  -h, --help                  show help
`,
  up: `Usage: sandgate up [flags]

Runs a complete sandgate in one process: a gateway replica with its workers and, unless a
Redis URL is given, a private redis-server (from PATH) keeping its data in STATE_DIR/redis,
locked with a generated password (STATE_DIR/redis-password, 0600, user sandgate).
Stops everything on SIGINT or SIGTERM.

It serves TLS with authentication on, with nothing to configure: on the first start it makes a
CA and a server certificate in STATE_DIR/tls (reused after) and an admin token (STATE_DIR/
admin-token, 0600), and writes the client config file ~/.config/sandgate/config.json (gateway
URL, CA, token; 0600) that client commands read, unless one there names another gateway.

Missing redis-server, bwrap (bubblewrap) or ip (iproute2; both for the local driver)? As root
on Debian, up installs them with apt-get, saying so on stderr; elsewhere it prints the command
to run.

Flags:
  --redis URL       use this Redis instead of a private one (SANDGATE_REDIS_URL)
  --grpc-port P     public gRPC port (SANDGATE_GRPC_PORT, default 8080)
  --http-port Q     HTTP port (SANDGATE_HTTP_PORT, default 8081)
  --state-dir DIR   state directory (SANDGATE_STATE_DIR, default ~/.local/state/sandgate)
  --driver D        compute driver: local or docker (SANDGATE_DRIVER; default local, or docker
                    when bubblewrap cannot be had and a Docker engine answers)
  --no-auth         let every caller in as an admin, unauthenticated (SANDGATE_AUTH=0)
  -h, --help        show help
`,
  service: `Usage:
  sandgate service expose SANDBOX TARGET-PORT [SERVICE] [--workspace W] [-o json]
  sandgate service list [SANDBOX] [--workspace W | --all-workspaces] [--limit N] [--offset N] [-o json]
  sandgate service get SANDBOX [SERVICE] [--workspace W] [-o json]
  sandgate service delete SANDBOX [SERVICE] [--workspace W] [-o json]
  sandgate service url SANDBOX [SERVICE] [--expires 1h] [--workspace W] [-o json]

A port inside a sandbox (127.0.0.1:TARGET-PORT there) exposed as a service answers at
<scheme>://<workspace>--<sandbox>[--<service>].<service domain>:<port>/ on every replica's HTTP
port (or the load balancer's): HTTP/1.1, streamed, WebSockets included. Private: requests need
Authorization: Bearer <token> of a caller of the workspace; 'service url' makes a signed public
link instead. A sandbox that is not serving answers 412.

${GLOBAL_FLAGS}

Run 'sandgate service COMMAND --help' for a command's flags.
`,
  'service expose': `Usage: sandgate service expose SANDBOX TARGET-PORT [SERVICE] [flags]

Exposes 127.0.0.1:TARGET-PORT inside SANDBOX as SERVICE (without SERVICE: the sandbox's unnamed
endpoint) and prints its URL. Exposing the same SANDBOX [SERVICE] again replaces the port.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the result as JSON
${GLOBAL_FLAGS}
`,
  'service list': `Usage: sandgate service list [SANDBOX] [flags]

Lists exposed services (of SANDBOX only, when given), oldest first.

Flags:
  --workspace W       the services of workspace W (default: your own)
  --all-workspaces    the services of every workspace (gateway admins only)
  --limit N           at most N (0 or absent: 100; at most 1000)
  --offset N          skip the first N
  -o json             print {"services": [...]} as JSON
${GLOBAL_FLAGS}
`,
  'service get': `Usage: sandgate service get SANDBOX [SERVICE] [flags]

Shows one exposed service: sandbox, service, target and URL.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the result as JSON
${GLOBAL_FLAGS}
`,
  'service delete': `Usage: sandgate service delete SANDBOX [SERVICE] [flags]

Stops exposing the service; exits 1 ("service endpoint not found") if there was none.

Flags:
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print the result as JSON
${GLOBAL_FLAGS}
`,
  'service url': `Usage: sandgate service url SANDBOX [SERVICE] [--expires 1h] [flags]

Prints a signed public link to the exposed service: anyone holding it reaches the service
without a token, at every replica, until it expires. It opens that one service only; exposing
it again after a delete makes old links invalid. A browser opening it gets a cookie for the
service's host and is redirected to the clean URL.

Flags:
  --expires D     lifetime: seconds or 30m, 1h, 7d (default 1h, at most 7d)
  --workspace W   the sandbox's workspace (default: your own)
  -o json         print {"url", "expires_at"} as JSON
${GLOBAL_FLAGS}
`,
  pool: `Usage:
  sandgate pool set NAME --size N [--image I] [--cpu C] [--memory M] [--policy FILE] [--auto-match] [-o json]
  sandgate pool list [-o json]
  sandgate pool delete NAME

A warm pool keeps N sandboxes of one template (image, resources, policy) started and Ready;
'sandgate sandbox create --pool NAME' claims one and gives it its name, labels, command and
environment, at once; with --auto-match, so does any create asking for exactly its template.
Gateway admins only.

${GLOBAL_FLAGS}

Run 'sandgate pool COMMAND --help' for a command's flags.
`,
  'pool set': `Usage: sandgate pool set NAME --size N [--image I] [--cpu C] [--memory M] [--policy FILE] [--auto-match] [-o json]

Creates or replaces warm pool NAME (SetPool; gateway admins only) and prints it. Setting it again
replaces its whole template: a flag left out means the default, not the pool's current value.
A new image, resources or policy is a new generation: the older members are replaced. NAME: a
DNS label, like a sandbox name.

Flags:
  --size N        members kept started and Ready (required; 0 to 64; 0 keeps the pool but
                  retires every member)
  --image I       the members' image (default: the gateway's)
  --cpu C         CPU limit: cores or millicores (2, 0.5, 500m), as 'sandbox create --cpu'
  --memory M      memory limit: bytes or a quantity (256Mi, 1Gi), as 'sandbox create --memory'
  --policy FILE   egress and identity policy, the format of 'sandbox create --policy'
  --auto-match    also serve creates that name no pool but ask for exactly this template (the
                  same image, CPU, memory and policy; unset means the default, as for a cold
                  create), e.g. a plain 'openshell sandbox create'; without it only
                  'sandbox create --pool NAME' claims from the pool
  -o json         print the pool as proto3 JSON
${GLOBAL_FLAGS}
`,
  'pool list': `Usage: sandgate pool list [-o json]

Lists the warm pools (ListPools; gateway admins only): NAME, SIZE, READY and STARTING members of
the current template, IMAGE, CPU and MEMORY limits ('-': none), GENERATION, AUTO-MATCH (yes:
creates of exactly its template claim from it) and FAILURES (members that could not start, in a
row: the pool then waits before starting more, and a line under the table says why and until when).

Flags:
  -o json         print {"pools": [...]} as proto3 JSON
${GLOBAL_FLAGS}
`,
  'pool delete': `Usage: sandgate pool delete NAME

Deletes warm pool NAME and its unclaimed members (DeletePool; gateway admins only); sandboxes
already claimed from it are their claimants' and stay. Exits 1 if there is no such pool.

${GLOBAL_FLAGS}
`,
};
