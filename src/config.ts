import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Type, type Static } from 'typebox'
import { Value } from 'typebox/value'
import { parseKey, parsePreviousKeys } from './secrets/crypto.js'

/**
 * Every environment variable the service reads, in one schema. `loadConfig` validates
 * the process environment against it at boot; a bad value stops the process with a
 * message naming the variable. Add new variables here, never read process.env elsewhere.
 */
export const EnvSchema = Type.Object({
  NODE_ENV: Type.Union([Type.Literal('development'), Type.Literal('production'), Type.Literal('test')], {
    default: 'development',
    description: '`production` turns dev-org access off by default and hardens cookies'
  }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000, description: 'HTTP port (`0`: any free port)' }),
  HOST: Type.String({ minLength: 1, default: '0.0.0.0', description: 'interface to listen on' }),
  PUBLIC_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description:
        'the URL this server is reached at from outside (behind a proxy or load balancer), e.g. `https://cairn.example.com`: org MCP servers and model providers may never point at it, as they may never point at the address and port the server listens on'
    })
  ),
  DATABASE_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://',
      description: '`postgres://…` to use a real PostgreSQL (15 or newer); unset: embedded PGlite in `DATA_DIR`'
    })
  ),
  DATABASE_POOL_MAX: Type.Integer({
    minimum: 1,
    maximum: 500,
    default: 20,
    description: 'connections per instance (postgres.js pool)'
  }),
  DATA_DIR: Type.String({
    minLength: 1,
    default: './data',
    description: 'embedded database (`DATA_DIR/pglite`) and local files'
  }),
  EMBEDDED_MAINTENANCE_SECONDS: Type.Integer({
    minimum: 0,
    maximum: 86_400,
    default: 60,
    description:
      'how often the embedded database vacuums and analyzes the tables autovacuum would (`0`: never; a real PostgreSQL has its own autovacuum)'
  }),
  ALLOW_DEV_ORG: Type.Optional(
    Type.Boolean({
      description: 'anonymous requests from loopback act in the seeded dev org (other addresses: `401`)',
      docDefault: 'on, off when `NODE_ENV=production`'
    })
  ),
  SERVICE_COMMIT: Type.Optional(
    Type.String({
      pattern: '^[A-Za-z0-9._-]{1,64}$',
      description:
        'release commit: the release is `run-events-v1:<commit>`; unset (or ending in `dev`) is a development build, which accepts any client release'
    })
  ),
  CORS_ORIGINS: Type.String({
    default: '',
    description:
      "comma-separated browser origins allowed to call with credentials (exact match); also the origins, besides the service's own, whose cookie-carrying writes pass the Origin check"
  }),
  TRUST_PROXY: Type.String({
    default: 'false',
    description: 'Fastify `trustProxy`: `true`, a hop count, or comma-separated proxy addresses/CIDRs'
  }),
  COOKIE_SECURE: Type.Optional(
    Type.Boolean({
      description:
        'session cookie `__Host-cairn_session` with `Secure` (HTTPS only); off: `cairn_session` for plain-http development',
      docDefault: 'on when `NODE_ENV=production`'
    })
  ),
  AUTH_RATE_LIMIT_PER_IP: Type.Integer({
    minimum: 1,
    maximum: 1_000_000,
    default: 100,
    description: 'sign-in and sign-up attempts per client address per window (the address honours `TRUST_PROXY` only)'
  }),
  AUTH_RATE_LIMIT_PER_ACCOUNT: Type.Integer({
    minimum: 1,
    maximum: 1_000_000,
    default: 10,
    description: 'failed sign-ins, and sign-ups, per email per window; past it even the right password waits'
  }),
  AUTH_RATE_LIMIT_WINDOW_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 900_000,
    description:
      'the rate-limit window (15 minutes); counters live in the database, so every instance counts against the same limits'
  }),
  IDENTITY_CACHE_MS: Type.Integer({
    minimum: 0,
    maximum: 10_000,
    default: 1000,
    description:
      'how long a resolved session or key is reused without the database (`0`: never); changes clear it at once on every instance (LISTEN/NOTIFY)'
  }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info', description: 'pino level: `fatal` … `trace`, or `silent`' }
  ),
  LOG_FORMAT: Type.Union([Type.Literal('auto'), Type.Literal('json'), Type.Literal('pretty')], {
    default: 'auto',
    description:
      '`json`: one JSON object per line (for log collectors); `pretty`: one readable line per fact; `auto`: `pretty` on a terminal outside production, else `json`. Either way a request is one line (`request`, with `method`, `url`, `status`, `ms` and its `reqId`) once answered'
  }),
  BODY_LIMIT: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'largest JSON body in bytes (a larger one is a 413)'
  }),
  REQUEST_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description: 'a request whose headers and body have not arrived within this is a `408 request_timeout`'
  }),
  SHUTDOWN_GRACE_MS: Type.Integer({
    minimum: 0,
    maximum: 600_000,
    default: 10_000,
    description:
      'after SIGTERM/SIGINT: background workers drain within half of it (work not done by then is left to its lease), in-flight requests get up to four fifths of it, and the process has exited (code 0) within it'
  }),
  RUN_WORKER_CONCURRENCY: Type.Integer({
    minimum: 0,
    maximum: 256,
    default: 100,
    description:
      "runs this instance executes at once; `0`: it serves HTTP and streams but runs nothing. A run waiting on a model (or on a person's approval, which frees its place) costs no CPU, so size this for the runs you want in flight, not for the cores: one instance on two cores keeps 128 runs that each wait 2 s on a model in flight with an event loop delay p99 of 21 to 32 ms (see Benchmarks). Lower it when runs mostly use the sandbox's shell (each command is a process)"
  }),
  RUN_QUEUE_MAX_PER_ORG: Type.Integer({
    minimum: 0,
    maximum: 10_000_000,
    default: 250,
    description:
      'an organization with this many runs queued gets `429 rate_limited` (with `Retry-After`) for the next run it starts through the API; `0`: no limit. 250 is a few seconds of work for one instance (measured: it finishes 35 to 60 echo runs a second while a flood keeps it accepting them), so a flood is told to slow down instead of queueing minutes of work; raise it for large batches, with more instances'
  }),
  RUN_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 1000,
    description: 'how often idle workers look for queued runs (a NOTIFY of a new run wakes them at once)'
  }),
  RUN_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description: 'lease of a running run, renewed every third of it; unrenewed, the run fails with `worker_lost`'
  }),
  RUN_SWEEP_MS: Type.Integer({
    minimum: 10,
    maximum: 3_600_000,
    default: 5000,
    description: 'how often every instance looks for expired leases'
  }),
  RUN_OUTPUT_CHECK_TIMEOUT_MS: Type.Integer({
    minimum: 1,
    maximum: 600_000,
    default: 2000,
    description:
      "how long checking a run's output against its `json_schema` response format may take; the check runs in a thread of its own, so a slow one never holds up requests, and past this the thread is stopped and the run fails with `output_invalid`"
  }),
  RUN_EVENTS_RETENTION_DAYS: Type.Integer({
    minimum: 7,
    maximum: 3650,
    default: 7,
    description: 'run events older than this are pruned hourly (at least 7)'
  }),
  SSE_HEARTBEAT_MS: Type.Integer({
    minimum: 10,
    maximum: 15_000,
    default: 15_000,
    description: 'heartbeat comment interval on event streams (at most 15 s)'
  }),
  SSE_STALL_MS: Type.Integer({
    minimum: 50,
    maximum: 600_000,
    default: 30_000,
    description: 'an SSE client that takes no byte for this long while output waits for it is disconnected'
  }),
  SSE_MAX_BUFFER_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'an SSE client that leaves this much unread is disconnected'
  }),
  ECHO_WORD_DELAY_MS: Type.Integer({
    minimum: 0,
    maximum: 10_000,
    default: 0,
    description: 'pause between the words the `echo` engine streams (demos, tests)'
  }),
  OPENAI_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description: 'an OpenAI-compatible API (`…/v1`); the `openai` engine is ready only when set and `/models` answers'
    })
  ),
  OPENAI_API_KEY: Type.Optional(Type.String({ description: 'bearer token for it' })),
  MODELS: Type.String({
    default: '',
    description: 'comma-separated model ids offered through `openai` (empty: what `/models` lists)'
  }),
  ANTHROPIC_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description: "the Messages API's origin (requests go to `…/v1/messages`)",
      docDefault: '`https://api.anthropic.com` when the key is set'
    })
  ),
  ANTHROPIC_API_KEY: Type.Optional(
    Type.String({
      description:
        'an Anthropic API key: the `anthropic` engine (the Messages API) is ready when it is set and `/v1/models` answers'
    })
  ),
  ANTHROPIC_MODELS: Type.String({
    default: '',
    description: 'comma-separated model ids offered through `anthropic` (empty: what `/v1/models` lists)'
  }),
  OPENAI_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 120_000,
    description: 'upstream timeout (to the first byte and between streamed chunks), for both engines'
  }),
  OPENAI_MAX_TOOL_ROUNDS: Type.Integer({
    minimum: 0,
    maximum: 100,
    default: 8,
    description:
      'model calls answered with tool results per `openai` run; one more tool request fails the run (`tool_rounds_exceeded`); `0` offers no tools'
  }),
  MODEL_RETRIES: Type.Integer({
    minimum: 0,
    maximum: 10,
    default: 3,
    description:
      'a model call answered `429`, `500`, `502`, `503`, `504` or `529`, that cannot connect, or whose stream is cut or sends an error before any content, is tried again this many times before its first token'
  }),
  MODEL_RETRY_BASE_MS: Type.Integer({
    minimum: 1,
    maximum: 60_000,
    default: 500,
    description:
      'the first retry waits between half of this and this, doubling each time, unless the answer says `Retry-After` (honoured up to 60 s)'
  }),
  MODEL_BREAKER_OPEN_MS: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    default: 15_000,
    description:
      'after a model call gave up on a provider it could not reach, calls to that provider from this instance fail at once (`model_unavailable`) for this long; then one call tries it again (`0`: never)'
  }),
  MODEL_CONTEXT_TOKENS: Type.Integer({
    minimum: 1000,
    maximum: 10_000_000,
    default: 64_000,
    description:
      'the earlier turns of a thread (their transcripts) sent with a run fit in this many tokens with its instructions and prompt (estimated as UTF-8 bytes / 3); long tool results are shortened first, then older turns are dropped whole'
  }),
  OPENAI_PROBE_TTL_MS: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    default: 30_000,
    description: 'how long a `/models` readiness probe is cached'
  }),
  PROVIDER_ALLOW_PRIVATE: Type.Boolean({
    default: false,
    description:
      'let org model providers (`POST /api/providers`) use loopback and private addresses (RFC 1918, `fc00::/7`, CGNAT, …): for a model server on the same host or network. Link-local and cloud metadata addresses stay refused'
  }),
  PROVIDER_CHECK_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 120_000,
    default: 10_000,
    description: "how long a provider check waits for the provider's `/models`"
  }),
  MCP_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 120_000,
    default: 5_000,
    description:
      "how long connecting to an org's MCP server and listing its tools may take: at a check, and at each run start (a server slower than this offers no tools to that run). MCP server URLs pass the same address guard as providers (`PROVIDER_ALLOW_PRIVATE`)"
  }),
  MCP_CALL_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 120_000,
    description: "how long one tool call on an org's MCP server may take before the model is told it failed"
  }),
  MCP_SESSION_IDLE_HOURS: Type.Integer({
    minimum: 1,
    maximum: 8760,
    default: 24,
    description: 'a session of `/api/mcp` unused this long ends; its client starts a new one'
  }),
  SANDBOX_PROVIDER: Type.Union([Type.Literal('local'), Type.Literal('none')], {
    default: 'local',
    description:
      'where agent tools, terminals and desktops run: `local` (a workspace per org and thread under `DATA_DIR/sandboxes/<org>/<thread>`) or `none` (no tools, no terminal)'
  }),
  SANDBOX_CONFINEMENT: Type.Union([Type.Literal('auto'), Type.Literal('bwrap'), Type.Literal('none')], {
    default: 'auto',
    description:
      '`local` provider: `auto` (bubblewrap when it works here, else no sandbox unless `SANDBOX_UNCONFINED=true`), `bwrap` (refuse to start without it), `none` (never bubblewrap; only with `SANDBOX_UNCONFINED=true`)'
  }),
  SANDBOX_UNCONFINED: Type.Boolean({
    default: false,
    description:
      "allow sandbox commands, terminals and desktops to run as plain processes with the service user's rights when bubblewrap cannot confine them; off: no sandbox then (`503 sandbox_unavailable`)"
  }),
  SANDBOX_UID: Type.Integer({
    minimum: 1,
    maximum: 4_294_967_294,
    default: 65534,
    description:
      'when the service runs as root: the unprivileged user id that sandboxed commands, terminals and file tools run as (bubblewrap only; never 0)'
  }),
  SANDBOX_GID: Type.Integer({
    minimum: 1,
    maximum: 4_294_967_294,
    default: 65534,
    description: 'when the service runs as root: their group id (no supplementary groups)'
  }),
  SANDBOX_NETWORK: Type.Boolean({
    default: false,
    description: 'give sandboxed commands the network (bubblewrap only; by default they have loopback only)'
  }),
  SANDBOX_EXEC_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description: 'wall-clock limit of one sandbox command; the whole process tree is killed'
  }),
  SANDBOX_OUTPUT_MAX_BYTES: Type.Integer({
    minimum: 256,
    maximum: 16 * 1024 * 1024,
    default: 256 * 1024,
    description: 'stdout and stderr kept per command (the rest is read and dropped)'
  }),
  SANDBOX_FILE_MAX_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'largest file read or written through the file tools'
  }),
  SANDBOX_WORKSPACE_MAX_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024 * 1024,
    default: 256 * 1024 * 1024,
    description:
      'largest thread workspace (the bytes of its files) saved to the blob store when the last run, terminal or desktop using it on an instance ends; past it nothing is saved, the run fails with `workspace_too_large` and the last saved workspace stays ([Deployment](deployment.md#thread-workspaces))'
  }),
  SANDBOX_WORKSPACE_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description:
      "how long an instance holds a thread's workspace without renewing its lease; a killed holder's threads are free again after this"
  }),
  SANDBOX_IDLE_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 900_000,
    description: 'a sandbox unused this long is reaped: its processes stop, its files stay'
  }),
  TOOL_OUTPUT_MAX_BYTES: Type.Integer({
    minimum: 256,
    maximum: 1024 * 1024,
    default: 32 * 1024,
    description: 'tool result text handed back to the model and recorded in `tool.result`'
  }),
  TOOL_APPROVAL_TIMEOUT_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 1_800_000,
    description:
      'a call waiting for approval this long expires (as if denied); its run, waiting in `requires_action` without a worker, then goes on'
  }),
  WS_MAX_MESSAGE_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 16 * 1024 * 1024,
    default: 256 * 1024,
    description: 'largest WebSocket message accepted (terminal, desktop); a larger one closes the socket with 1009'
  }),
  MEMORY_BACKEND: Type.Union([Type.Literal('postgres'), Type.Literal('http'), Type.Literal('off')], {
    default: 'postgres',
    description: 'Memory Hub pools: `postgres` (this database), `http` (a mem0 REST service) or `off`'
  }),
  MEMORY_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description: 'base URL of the mem0-compatible service (required with `MEMORY_BACKEND=http`)'
    })
  ),
  MEMORY_API_KEY: Type.Optional(
    Type.String({ minLength: 1, description: 'sent to `MEMORY_URL` as `Authorization: Token <key>`' })
  ),
  MEMORY_HTTP_TIMEOUT_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 10_000,
    description:
      'one request to `MEMORY_URL`; a capture whose request times out is left as an orphan (the write may have happened)'
  }),
  MEMORY_CAPTURE_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 8,
    description: 'delivery attempts of a capture before it is `dead`'
  }),
  MEMORY_CAPTURE_LEASE_MS: Type.Integer({
    minimum: 10,
    maximum: 3_600_000,
    default: 60_000,
    description:
      'a `delivering` capture older than its lease goes back to `pending` with the postgres backend (its outcome is known); with the http backend it is an orphan (listed, never retried by itself)'
  }),
  MEMORY_CAPTURE_BACKOFF_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 1_000,
    description: 'first retry delay; doubles per attempt, with jitter (between half and all of it)'
  }),
  MEMORY_CAPTURE_BACKOFF_MAX_MS: Type.Integer({
    minimum: 1,
    maximum: 86_400_000,
    default: 300_000,
    description: 'longest retry delay'
  }),
  MEMORY_CAPTURE_POLL_MS: Type.Integer({
    minimum: 1,
    maximum: 60_000,
    default: 250,
    description: 'how often an idle delivery worker looks for due captures'
  }),
  MEMORY_CAPTURE_BATCH: Type.Integer({
    minimum: 1,
    maximum: 1000,
    default: 200,
    description: 'captures claimed per round (`FOR UPDATE SKIP LOCKED`)'
  }),
  MEMORY_CAPTURE_CONCURRENCY: Type.Integer({
    minimum: 1,
    maximum: 64,
    default: 8,
    description:
      'deliveries in flight per instance (http backend; the postgres backend writes a round in one transaction)'
  }),
  MEMORY_SEARCH_CACHE: Type.Integer({
    minimum: 0,
    maximum: 1_000_000,
    default: 1000,
    description:
      "memory search results each instance keeps (postgres backend); any change to a pool's facts retires its cached results everywhere at once (`0`: no cache)"
  }),
  MEMORY_RECALL_LIMIT: Type.Integer({
    minimum: 1,
    maximum: 50,
    default: 5,
    description:
      "facts a run recalls at most (from its prompt's significant words), given to the model as one system message"
  }),
  MEMORY_CAPTURE_WORKER: Type.Boolean({
    default: true,
    description: 'run the capture delivery worker in this process'
  }),
  ARTIFACT_STORE: Type.Union([Type.Literal('fs'), Type.Literal('s3')], {
    default: 'fs',
    description:
      'where upload and artifact bytes live: `fs` (files under `DATA_DIR/blobs`) or `s3` (any S3-compatible server)'
  }),
  UPLOAD_MAX_BYTES: Type.Integer({
    minimum: 1,
    maximum: 5 * 1024 ** 4,
    default: 25 * 1024 * 1024,
    description: 'largest upload or artifact content write (25 MiB); above it `413 payload_too_large`, nothing kept'
  }),
  S3_ENDPOINT: Type.Optional(
    Type.String({ description: "the S3 server's URL (MinIO, Ceph, R2, …); unset: AWS for `S3_REGION`" })
  ),
  S3_BUCKET: Type.Optional(Type.String({ description: 'the bucket (required with `ARTIFACT_STORE=s3`)' })),
  S3_REGION: Type.String({ default: 'us-east-1', description: "the bucket's region" }),
  S3_ACCESS_KEY_ID: Type.Optional(
    Type.String({
      description:
        "the credentials' key id; unset (with `S3_SECRET_ACCESS_KEY`): the AWS SDK's default chain (environment, profile, instance role)"
    })
  ),
  S3_SECRET_ACCESS_KEY: Type.Optional(Type.String({ description: "the credentials' secret, with `S3_ACCESS_KEY_ID`" })),
  S3_FORCE_PATH_STYLE: Type.Boolean({
    default: false,
    description: 'path-style URLs (`endpoint/bucket/key`), which most self-hosted servers need'
  }),
  BLOB_SWEEP_MS: Type.Integer({
    minimum: 10,
    maximum: 86_400_000,
    default: 60_000,
    description: 'how often every instance removes blobs nothing references any more'
  }),
  EMBEDDING_MODEL: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 200,
      description:
        "the deployment's embedding model for search by meaning, served by `EMBEDDING_BASE_URL`'s OpenAI-compatible `/embeddings`; unset: an org's choice (`PUT /api/models/embedding`), else the built-in offline embedder"
    })
  ),
  EMBEDDING_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description: 'the OpenAI-compatible API (`…/v1`) serving `EMBEDDING_MODEL`',
      docDefault: '`OPENAI_BASE_URL`'
    })
  ),
  EMBEDDING_API_KEY: Type.Optional(
    Type.String({ description: 'bearer token for `EMBEDDING_BASE_URL`', docDefault: '`OPENAI_API_KEY`' })
  ),
  EMBEDDING_WORKER: Type.Boolean({
    default: true,
    description:
      'embed memory facts, knowledge records and document chunks in this process (the job is shared by every instance that runs it)'
  }),
  EMBEDDING_BATCH: Type.Integer({
    minimum: 1,
    maximum: 2048,
    default: 64,
    description: 'texts per claim of the embedding job, and per `/embeddings` call'
  }),
  EMBEDDING_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 5,
    description:
      'tries of a text before its embedding is `failed` (a model change or `POST /api/memory/item/:id/embed` tries again)'
  }),
  EMBEDDING_BACKOFF_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 2_000,
    description: 'wait before a failed embedding is tried again (doubling per try, with jitter)'
  }),
  EMBEDDING_BACKOFF_MAX_MS: Type.Integer({
    minimum: 1,
    maximum: 86_400_000,
    default: 300_000,
    description: 'longest wait between tries of an embedding'
  }),
  EMBEDDING_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    default: 30_000,
    description: 'how long the embedding job waits for an `/embeddings` answer'
  }),
  EMBEDDING_QUERY_TIMEOUT_MS: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    default: 2_000,
    description:
      'how long a search waits for its query\'s embedding before it ranks by words alone (`mode: "fulltext"`)'
  }),
  EMBEDDING_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description:
      'how long claimed texts are held (renewed every third of it while working); past it, another instance takes them'
  }),
  EMBEDDING_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 2000,
    description: 'how often an idle embedding job looks for texts (a write on the same instance wakes it at once)'
  }),
  EMBEDDING_MIN_SIMILARITY: Type.Optional(
    Type.Number({
      minimum: -1,
      maximum: 1,
      description: 'the least cosine similarity a match by meaning needs to be a hit',
      docDefault: '`0.3`'
    })
  ),
  KNOWLEDGE_WORKER: Type.Boolean({ default: true, description: 'extract knowledge documents in this process' }),
  KNOWLEDGE_CONCURRENCY: Type.Integer({
    minimum: 1,
    maximum: 16,
    default: 1,
    description: 'documents this instance extracts at once (each in its own child process)'
  }),
  KNOWLEDGE_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description:
      'how long a claimed document is held (renewed every third of it while extracting); past it, another worker takes it'
  }),
  KNOWLEDGE_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 2000,
    description:
      'how often an idle extraction worker looks for documents (an upload on the same instance wakes it at once)'
  }),
  KNOWLEDGE_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 3,
    description: 'claims of a document before it is `failed`'
  }),
  KNOWLEDGE_BACKOFF_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 5_000,
    description: 'wait before a failed document is tried again; doubles per attempt, with jitter'
  }),
  KNOWLEDGE_BACKOFF_MAX_MS: Type.Integer({
    minimum: 1,
    maximum: 86_400_000,
    default: 300_000,
    description: 'longest wait between attempts of a document'
  }),
  KNOWLEDGE_EXTRACT_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description: 'longest text extraction of one document; past it the process is killed and the document fails'
  }),
  KNOWLEDGE_SEARCH_CACHE: Type.Integer({
    minimum: 0,
    maximum: 1_000_000,
    default: 1000,
    description:
      "search results each instance keeps; an org's change to its records or documents retires its cached results everywhere at once (`0`: no cache)"
  }),
  SECRETS_KEY: Type.Optional(
    Type.String({
      description:
        'the key org secrets are sealed with: 32 random bytes in base64 (`openssl rand -base64 32`). Unset: on the embedded database a key is made once in `DATA_DIR/secrets.key` (mode 0600, a warning at every start); on Postgres the secrets routes answer `503 secrets_unavailable`'
    })
  ),
  SECRETS_PREVIOUS_KEYS: Type.Optional(
    Type.String({
      description:
        'comma-separated earlier keys: they still open secrets, and each instance seals those rows again under `SECRETS_KEY` in the background'
    })
  ),
  SCHEDULER: Type.Boolean({
    default: true,
    description: 'fire due automations from this instance (any number of instances may; each tick fires once)'
  }),
  SCHEDULER_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    default: 1000,
    description:
      'how often the scheduler looks for automations another instance changed; it otherwise sleeps until the next tick'
  }),
  SCHEDULER_GRACE_MS: Type.Integer({
    minimum: 1000,
    maximum: 3_600_000,
    default: 60_000,
    description:
      "a tick found later than this (no instance ran at its time) is a missed tick, handled by the automation's `catchUp`"
  }),
  GITHUB_API_URL: Type.String({
    pattern: '^https?://',
    default: 'https://api.github.com',
    description:
      "GitHub's REST API (GitHub Enterprise Server: `https://<host>/api/v3`); tests point it at a local server speaking the same protocol"
  }),
  GITHUB_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    default: 15_000,
    description: 'longest wait for one GitHub request; then `502 upstream_failed` (a wiki run fails)'
  }),
  SLACK_API_URL: Type.String({
    pattern: '^https?://',
    default: 'https://slack.com/api/',
    description:
      "Slack's Web API base (`auth.test`, `chat.postMessage`, `chat.update`, `conversations.replies`); tests point it at a local server"
  }),
  SLACK_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 120_000,
    default: 10_000,
    description: 'longest Slack Web API call; a post that times out counts as "may have landed"'
  }),
  SLACK_OUTBOX: Type.Boolean({
    default: true,
    description:
      'post Slack replies and approval requests from this instance (any number of instances may; each run gets one reply, each stop for approval one message)'
  }),
  SLACK_OUTBOX_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 1000,
    description:
      'how often the reply and approval-request outboxes look for due posts; a run ending, or stopping for approval, on any instance wakes them at once'
  }),
  SLACK_OUTBOX_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description:
      'how long a claimed reply or approval request is held; past it (its instance died mid-post) another instance takes it over. Keep it above `SLACK_TIMEOUT_MS`'
  }),
  SLACK_RETRY_BASE_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 2000,
    description:
      'first wait before a failed reply or approval request is tried again; doubles per attempt, with jitter, at most 10 minutes (a 429 waits its `Retry-After`)'
  }),
  SLACK_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 8,
    description: 'attempts before a reply or approval request is given up (`failed`, its `last_error` kept)'
  }),
  KNOWLEDGE_EXTRACT_MEMORY_MB: Type.Integer({
    minimum: 32,
    maximum: 16_384,
    default: 512,
    description: 'heap of an extraction process; a document that needs more fails'
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description:
        "an OpenTelemetry collector's OTLP/HTTP base URL (`http://collector:4318`): traces are exported to `<it>/v1/traces` (JSON). Unset, with the next one unset too: no tracing at all, at no cost (see [Observability](observability.md))"
    })
  ),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description: 'the full URL traces are posted to, instead of `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`'
    })
  ),
  OTEL_EXPORTER_OTLP_HEADERS: Type.Optional(
    Type.String({
      description:
        "headers sent with every export: `key=value` pairs separated by commas, values percent-encoded (a collector's `Authorization`)"
    })
  ),
  OTEL_SERVICE_NAME: Type.String({
    minLength: 1,
    default: 'cairn',
    description: 'the `service.name` of the spans'
  }),
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: Type.Boolean({
    default: false,
    description:
      "`true`: spans also record prompts, answers, tool arguments and results and recall queries, with the run's secret values redacted"
  }),
  METRICS_TOKEN: Type.Optional(
    Type.String({
      minLength: 16,
      description:
        '`GET /metrics` answers a caller that sends `Authorization: Bearer <it>` (at least 16 characters) from any address; without it only callers on this host (loopback); anyone else gets `404`'
    })
  ),
  METRICS_PER_ORG: Type.Boolean({
    default: false,
    description:
      '`true`: run, tool, queue depth and approval metrics carry an `org` label (one series per organization: for a few organizations only)'
  })
})

export type Env = Static<typeof EnvSchema>

export interface Config extends Omit<Env, 'ALLOW_DEV_ORG' | 'COOKIE_SECURE' | 'CORS_ORIGINS' | 'TRUST_PROXY'> {
  ALLOW_DEV_ORG: boolean
  COOKIE_SECURE: boolean
  CORS_ORIGINS: string[]
  TRUST_PROXY: boolean | number | string[]
  /** `run-events-v1:<commit>`, or `run-events-v1:dev` for a development build */
  release: string
  /** a development build accepts any client release */
  isDevBuild: boolean
}

export const API_COMPAT = 'run-events-v1'

export class ConfigError extends Error {
  override name = 'ConfigError'
}

const memoryFiles = new Map<string, string>()
/**
 * Where this process keeps its files (blobs, sandboxes, the secrets key file): `DATA_DIR`,
 * or, when `DATA_DIR` is `memory://…` (an in-memory database that lives as long as the
 * process), a temporary directory of its own, removed when the process exits. Never a
 * folder named after the database URL.
 */
export function filesDir(config: Pick<Config, 'DATA_DIR'>): string {
  if (!config.DATA_DIR.startsWith('memory://')) return config.DATA_DIR
  let dir = memoryFiles.get(config.DATA_DIR)
  if (!dir) {
    const made = mkdtempSync(join(tmpdir(), 'cairn-memory-'))
    process.once('exit', () => rmSync(made, { recursive: true, force: true }))
    memoryFiles.set(config.DATA_DIR, (dir = made))
  }
  return dir
}

/** Validates an environment (process.env by default) and derives the runtime config. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const raw: Record<string, string> = {}
  for (const key of Object.keys(EnvSchema.properties)) {
    const value = env[key]
    if (value !== undefined && value.trim() !== '') raw[key] = value.trim()
  }
  const parsed = Value.Convert(EnvSchema, Value.Default(EnvSchema, raw))
  const errors = [...Value.Errors(EnvSchema, parsed)]
  if (errors.length > 0) {
    const seen = new Set<string>()
    const lines = errors
      .map((e) => ({ name: e.instancePath.slice(1) || '(root)', message: e.message }))
      .filter((e) => !seen.has(e.name) && seen.add(e.name))
      .map((e) => `${e.name}=${JSON.stringify(raw[e.name] ?? '')}: ${expected(e.name) ?? e.message}`)
    throw new ConfigError(`invalid configuration:\n  ${lines.join('\n  ')}`)
  }
  const values = parsed as Env
  if (values.MEMORY_BACKEND === 'http' && !values.MEMORY_URL) {
    throw new ConfigError('invalid configuration:\n  MEMORY_URL: required when MEMORY_BACKEND=http')
  }
  if (values.PUBLIC_URL !== undefined && !URL.canParse(values.PUBLIC_URL)) {
    throw new ConfigError('invalid configuration:\n  PUBLIC_URL: must be an absolute http(s) URL')
  }
  if (values.ARTIFACT_STORE === 's3' && !values.S3_BUCKET) {
    throw new ConfigError('invalid configuration:\n  S3_BUCKET: required when ARTIFACT_STORE=s3')
  }
  if (values.SANDBOX_CONFINEMENT === 'none' && !values.SANDBOX_UNCONFINED) {
    throw new ConfigError(
      'invalid configuration:\n  SANDBOX_CONFINEMENT=none: runs commands outside bubblewrap; it needs SANDBOX_UNCONFINED=true'
    )
  }
  try {
    // the message names the variable, never its value
    if (values.SECRETS_KEY !== undefined) parseKey(values.SECRETS_KEY, 'SECRETS_KEY')
    parsePreviousKeys(values.SECRETS_PREVIOUS_KEYS)
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  ${(err as Error).message}`)
  }
  const release = `${API_COMPAT}:${values.SERVICE_COMMIT ?? 'dev'}`
  return {
    ...values,
    ALLOW_DEV_ORG: values.ALLOW_DEV_ORG ?? values.NODE_ENV !== 'production',
    COOKIE_SECURE: values.COOKIE_SECURE ?? values.NODE_ENV === 'production',
    CORS_ORIGINS: parseOrigins(values.CORS_ORIGINS),
    TRUST_PROXY: parseTrustProxy(values.TRUST_PROXY),
    release,
    isDevBuild: /[:-]dev$/.test(release)
  }
}

/**
 * What a variable accepts, in words the operator can act on (the schema's own message says "must be equal to
 * constant").
 */
function expected(name: string): string | null {
  const schema = (
    EnvSchema.properties as Record<
      string,
      { anyOf?: Array<{ const?: unknown }>; type?: string; minimum?: number; maximum?: number }
    >
  )[name]
  if (!schema) return null
  if (schema.anyOf?.every((s) => s.const !== undefined))
    return `must be one of ${schema.anyOf.map((s) => String(s.const)).join(', ')}`
  if (schema.type === 'boolean') return 'must be true or false'
  if (schema.type === 'integer') return `must be a whole number from ${schema.minimum} to ${schema.maximum}`
  return null
}

function parseOrigins(list: string): string[] {
  const origins = list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
  for (const origin of origins) {
    let url: URL
    try {
      url = new URL(origin)
    } catch {
      throw new ConfigError(`invalid configuration:\n  CORS_ORIGINS: ${JSON.stringify(origin)} is not an origin`)
    }
    if (url.origin !== origin) {
      throw new ConfigError(
        `invalid configuration:\n  CORS_ORIGINS: ${JSON.stringify(origin)} should be written ${url.origin}`
      )
    }
  }
  return origins
}

function parseTrustProxy(value: string): boolean | number | string[] {
  if (value === 'true') return true
  if (value === 'false') return false
  if (/^\d+$/.test(value)) return Number(value)
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
}

/** Builds a config for tests and tools: defaults plus the given overrides. */
export function testConfig(overrides: Partial<Record<keyof Env, string>> = {}): Config {
  // no embedding in the background unless a test asks: its vectors would change rankings under the test's feet
  // no model breaker unless a test asks: tests script a provider's faults one call after another
  return loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    EMBEDDING_WORKER: 'false',
    MODEL_BREAKER_OPEN_MS: '0',
    ...overrides
  })
}
