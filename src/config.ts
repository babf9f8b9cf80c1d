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
    description: 'production turns dev-org access off by default and sets secure cookies'
  }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000, description: 'HTTP port' }),
  HOST: Type.String({ minLength: 1, default: '0.0.0.0', description: 'interface to listen on' }),
  PUBLIC_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description:
        'the URL this server is reached at from outside (behind a proxy or load balancer); org MCP servers and providers may never point at it'
    })
  ),
  DATABASE_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://',
      description: 'real Postgres (postgres://…); unset means embedded PGlite in DATA_DIR'
    })
  ),
  DATABASE_POOL_MAX: Type.Integer({ minimum: 1, maximum: 500, default: 20, description: 'postgres.js pool size' }),
  DATA_DIR: Type.String({ minLength: 1, default: './data', description: 'embedded database and local files' }),
  EMBEDDED_MAINTENANCE_SECONDS: Type.Integer({
    minimum: 0,
    maximum: 86_400,
    default: 60,
    description: 'how often the embedded database vacuums and analyzes the tables autovacuum would (0: never)'
  }),
  ALLOW_DEV_ORG: Type.Optional(
    Type.Boolean({
      description: 'anonymous requests act in the seeded dev org; default on unless NODE_ENV=production'
    })
  ),
  SERVICE_COMMIT: Type.Optional(
    Type.String({
      pattern: '^[A-Za-z0-9._-]{1,64}$',
      description: 'release commit; unset means a development build (release run-events-v1:dev)'
    })
  ),
  CORS_ORIGINS: Type.String({ default: '', description: 'comma-separated browser origins allowed with credentials' }),
  TRUST_PROXY: Type.String({
    default: 'false',
    description: 'Fastify trustProxy: true, false, a hop count, or comma-separated addresses/CIDRs'
  }),
  COOKIE_SECURE: Type.Optional(
    Type.Boolean({
      description: 'session cookie __Host-cairn_session with Secure (HTTPS only); default on when NODE_ENV=production'
    })
  ),
  AUTH_RATE_LIMIT_PER_IP: Type.Integer({
    minimum: 1,
    maximum: 1_000_000,
    default: 100,
    description: 'sign-in and sign-up attempts per client address per window'
  }),
  AUTH_RATE_LIMIT_PER_ACCOUNT: Type.Integer({
    minimum: 1,
    maximum: 1_000_000,
    default: 10,
    description: 'failed sign-ins (and sign-ups) per email per window'
  }),
  AUTH_RATE_LIMIT_WINDOW_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 900_000,
    description: 'rate-limit window for sign-in and sign-up'
  }),
  IDENTITY_CACHE_MS: Type.Integer({
    minimum: 0,
    maximum: 10_000,
    default: 1000,
    description: 'how long a resolved session or API key is reused without the database'
  }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info' }
  ),
  LOG_FORMAT: Type.Union([Type.Literal('auto'), Type.Literal('json'), Type.Literal('pretty')], {
    default: 'auto',
    description:
      'json: one JSON object per line; pretty: one readable line per fact; auto: pretty on a terminal outside production, else json'
  }),
  BODY_LIMIT: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'max JSON body bytes'
  }),
  REQUEST_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description: 'a request whose headers and body are not received within this is answered 408 request_timeout'
  }),
  SHUTDOWN_GRACE_MS: Type.Integer({
    minimum: 0,
    maximum: 600_000,
    default: 10_000,
    description: 'time allowed for in-flight work at shutdown'
  }),
  RUN_WORKER_CONCURRENCY: Type.Integer({
    minimum: 0,
    maximum: 256,
    default: 100,
    description:
      'runs one instance executes at once (0: this instance runs none); a run waiting on a model or a person costs no CPU, so size it for the runs in flight, not for the cores'
  }),
  RUN_QUEUE_MAX_PER_ORG: Type.Integer({
    minimum: 0,
    maximum: 10_000_000,
    default: 250,
    description:
      'an org with this many runs queued (not yet started) gets 429 rate_limited with Retry-After for the next one it starts through the API (0: no limit)'
  }),
  RUN_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 1000,
    description: 'how often idle workers look for queued runs (NOTIFY wakes them sooner)'
  }),
  RUN_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description: 'a running run is failed with worker_lost when its lease is not renewed for this long'
  }),
  RUN_SWEEP_MS: Type.Integer({
    minimum: 10,
    maximum: 3_600_000,
    default: 5000,
    description: 'how often each instance looks for expired leases'
  }),
  RUN_OUTPUT_CHECK_TIMEOUT_MS: Type.Integer({
    minimum: 1,
    maximum: 600_000,
    default: 2000,
    description:
      "how long checking a run's output against its JSON Schema may take (in a thread of its own); past it the run fails with output_invalid"
  }),
  RUN_EVENTS_RETENTION_DAYS: Type.Integer({
    minimum: 7,
    maximum: 3650,
    default: 7,
    description: 'run events older than this are pruned (at least 7 days)'
  }),
  SSE_HEARTBEAT_MS: Type.Integer({
    minimum: 10,
    maximum: 15_000,
    default: 15_000,
    description: 'SSE heartbeat comment interval'
  }),
  SSE_STALL_MS: Type.Integer({
    minimum: 50,
    maximum: 600_000,
    default: 30_000,
    description: 'an SSE client that has not taken a byte for this long while output waits is dropped'
  }),
  SSE_MAX_BUFFER_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'an SSE client that leaves this much unread is dropped'
  }),
  ECHO_WORD_DELAY_MS: Type.Integer({
    minimum: 0,
    maximum: 10_000,
    default: 0,
    description: 'pause between words of the echo engine (tests, demos)'
  }),
  OPENAI_BASE_URL: Type.Optional(
    Type.String({ pattern: '^https?://', description: 'OpenAI-compatible API base, e.g. https://api.openai.com/v1' })
  ),
  OPENAI_API_KEY: Type.Optional(Type.String({ description: 'bearer token for OPENAI_BASE_URL' })),
  MODELS: Type.String({ default: '', description: 'comma-separated model ids offered through the openai engine' }),
  ANTHROPIC_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description:
        'Anthropic Messages API origin (requests go to …/v1/messages); https://api.anthropic.com when ANTHROPIC_API_KEY is set without it'
    })
  ),
  ANTHROPIC_API_KEY: Type.Optional(Type.String({ description: 'sent as x-api-key to ANTHROPIC_BASE_URL' })),
  ANTHROPIC_MODELS: Type.String({
    default: '',
    description: 'comma-separated model ids offered through the anthropic engine (empty: the ones its /v1/models lists)'
  }),
  OPENAI_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 120_000,
    description: 'upstream request timeout (also between streamed chunks)'
  }),
  OPENAI_MAX_TOOL_ROUNDS: Type.Integer({
    minimum: 0,
    maximum: 100,
    default: 8,
    description: 'model calls answered with tool results per run before the run fails (0: tools are not offered)'
  }),
  MODEL_RETRIES: Type.Integer({
    minimum: 0,
    maximum: 10,
    default: 3,
    description:
      'a model call answered 429, 500, 502, 503 or 504, or that cannot connect, is tried again this many times before its first token (Retry-After honoured, at most 60 s)'
  }),
  MODEL_RETRY_BASE_MS: Type.Integer({
    minimum: 1,
    maximum: 60_000,
    default: 500,
    description:
      'the first retry of a model call waits between half of this and this, doubling each time (when the answer has no Retry-After)'
  }),
  MODEL_BREAKER_OPEN_MS: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    default: 15_000,
    description:
      'after a model call gives up on a provider it cannot reach (its retries spent), calls to that provider fail at once for this long, from every run, chat and Slack thread of this instance; then one call tries again (0: never)'
  }),
  MODEL_CONTEXT_TOKENS: Type.Integer({
    minimum: 1000,
    maximum: 10_000_000,
    default: 64_000,
    description:
      "a run is sent its thread's earlier turns (their transcripts) that fit in this many tokens with its instructions and prompt (estimated as UTF-8 bytes / 3); long tool results are shortened first, then older turns are dropped whole"
  }),
  OPENAI_PROBE_TTL_MS: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    default: 30_000,
    description: 'how long a /models readiness probe result is cached'
  }),
  PROVIDER_ALLOW_PRIVATE: Type.Boolean({
    default: false,
    description:
      'let org model providers (POST /api/providers) use loopback and private addresses (RFC 1918, fc00::/7, CGNAT); link-local and cloud metadata addresses are refused regardless'
  }),
  PROVIDER_CHECK_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 120_000,
    default: 10_000,
    description: 'how long a provider check waits for its /models'
  }),
  MCP_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 120_000,
    default: 5_000,
    description:
      'how long connecting to an org MCP server and listing its tools may take (a check, and each run start: a server slower than this offers no tools to that run)'
  }),
  MCP_CALL_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 120_000,
    description: 'how long one tool call on an org MCP server may take before the model is told it failed'
  }),
  MCP_SESSION_IDLE_HOURS: Type.Integer({
    minimum: 1,
    maximum: 8760,
    default: 24,
    description: 'a session of /api/mcp unused this long ends (its client starts a new one)'
  }),
  SANDBOX_PROVIDER: Type.Union([Type.Literal('local'), Type.Literal('none')], {
    default: 'local',
    description:
      'where agent tools and terminals run: local (a workspace per org and thread under DATA_DIR/sandboxes) or none'
  }),
  SANDBOX_CONFINEMENT: Type.Union([Type.Literal('auto'), Type.Literal('bwrap'), Type.Literal('none')], {
    default: 'auto',
    description:
      'local provider: auto (bubblewrap when it works, else no sandbox unless SANDBOX_UNCONFINED=true), bwrap (refuse to start without it) or none (never bubblewrap; needs SANDBOX_UNCONFINED=true)'
  }),
  SANDBOX_UNCONFINED: Type.Boolean({
    default: false,
    description:
      "allow sandbox commands, terminals and desktops to run as plain processes with the service user's rights when bubblewrap cannot confine them (default: no sandbox then, 503 sandbox_unavailable)"
  }),
  SANDBOX_UID: Type.Integer({
    minimum: 1,
    maximum: 4_294_967_294,
    default: 65534,
    description:
      'when the service runs as root: the unprivileged user id sandboxed commands, terminals and file tools run as (bubblewrap only)'
  }),
  SANDBOX_GID: Type.Integer({
    minimum: 1,
    maximum: 4_294_967_294,
    default: 65534,
    description: 'when the service runs as root: the group id sandboxed processes run as (no supplementary groups)'
  }),
  SANDBOX_NETWORK: Type.Boolean({
    default: false,
    description: 'give sandboxed commands network access (bubblewrap only; default no network)'
  }),
  SANDBOX_EXEC_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description: 'wall-clock limit of one sandbox command'
  }),
  SANDBOX_OUTPUT_MAX_BYTES: Type.Integer({
    minimum: 256,
    maximum: 16 * 1024 * 1024,
    default: 256 * 1024,
    description: 'stdout/stderr kept per sandbox command (the rest is dropped)'
  }),
  SANDBOX_FILE_MAX_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'largest file read or written through the sandbox file API'
  }),
  SANDBOX_WORKSPACE_MAX_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024 * 1024,
    default: 256 * 1024 * 1024,
    description:
      'largest thread workspace (bytes of its files) saved to the blob store when a run or terminal that changed it ends; past it the changes are not saved and the run fails with workspace_too_large'
  }),
  SANDBOX_WORKSPACE_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 30_000,
    description:
      "how long an instance holds a thread workspace without renewing it; a killed holder's workspace is free again after this"
  }),
  SANDBOX_IDLE_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 900_000,
    description: 'a sandbox unused this long is reaped (processes stopped, files kept)'
  }),
  TOOL_OUTPUT_MAX_BYTES: Type.Integer({
    minimum: 256,
    maximum: 1024 * 1024,
    default: 32 * 1024,
    description: 'tool result text handed back to the model and recorded as an event'
  }),
  TOOL_APPROVAL_TIMEOUT_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 1_800_000,
    description: 'a tool call waiting for approval longer than this is expired (treated as denied)'
  }),
  WS_MAX_MESSAGE_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 16 * 1024 * 1024,
    default: 256 * 1024,
    description: 'largest WebSocket message accepted (terminal, desktop); larger closes with 1009'
  }),
  MEMORY_BACKEND: Type.Union([Type.Literal('postgres'), Type.Literal('http'), Type.Literal('off')], {
    default: 'postgres',
    description: 'Memory Hub pools: postgres (this database), http (a mem0 REST service at MEMORY_URL) or off'
  }),
  MEMORY_URL: Type.Optional(
    Type.String({ pattern: '^https?://', description: 'base URL of the mem0-compatible service (MEMORY_BACKEND=http)' })
  ),
  MEMORY_API_KEY: Type.Optional(
    Type.String({ minLength: 1, description: 'sent as `Authorization: Token <key>` to MEMORY_URL' })
  ),
  MEMORY_HTTP_TIMEOUT_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 10_000,
    description: 'timeout of one request to MEMORY_URL'
  }),
  MEMORY_CAPTURE_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 8,
    description: 'delivery attempts of a capture before it is dead'
  }),
  MEMORY_CAPTURE_LEASE_MS: Type.Integer({
    minimum: 10,
    maximum: 3_600_000,
    default: 60_000,
    description: 'a delivering capture whose lease is older is an orphan'
  }),
  MEMORY_CAPTURE_BACKOFF_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 1_000,
    description: 'first retry delay (doubles per attempt, with jitter)'
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
    description: 'how often an idle delivery worker looks for work'
  }),
  MEMORY_CAPTURE_BATCH: Type.Integer({
    minimum: 1,
    maximum: 1000,
    default: 200,
    description: 'captures claimed per round'
  }),
  MEMORY_CAPTURE_CONCURRENCY: Type.Integer({
    minimum: 1,
    maximum: 64,
    default: 8,
    description: 'deliveries in flight per instance'
  }),
  MEMORY_SEARCH_CACHE: Type.Integer({
    minimum: 0,
    maximum: 1_000_000,
    default: 1000,
    description:
      'memory search results kept per instance, dropped when their pool changes (0: no cache; postgres backend)'
  }),
  MEMORY_RECALL_LIMIT: Type.Integer({
    minimum: 1,
    maximum: 50,
    default: 5,
    description:
      "facts recalled for a run at most (from the prompt's significant words), given to the model as one system message"
  }),
  MEMORY_CAPTURE_WORKER: Type.Boolean({
    default: true,
    description: 'run the capture delivery worker in this process'
  }),
  ARTIFACT_STORE: Type.Union([Type.Literal('fs'), Type.Literal('s3')], {
    default: 'fs',
    description:
      'where upload and artifact bytes live: fs (DATA_DIR/blobs; share it between instances) or s3 (any S3-compatible server)'
  }),
  UPLOAD_MAX_BYTES: Type.Integer({
    minimum: 1,
    maximum: 5 * 1024 ** 4,
    default: 25 * 1024 * 1024,
    description: 'largest upload or artifact content write (413 above)'
  }),
  S3_ENDPOINT: Type.Optional(Type.String({ description: 'S3 endpoint URL (unset: AWS for S3_REGION)' })),
  S3_BUCKET: Type.Optional(Type.String({ description: 'bucket for ARTIFACT_STORE=s3 (required then)' })),
  S3_REGION: Type.String({ default: 'us-east-1', description: 'S3 region' }),
  S3_ACCESS_KEY_ID: Type.Optional(Type.String({ description: 'S3 credentials (unset: the AWS SDK default chain)' })),
  S3_SECRET_ACCESS_KEY: Type.Optional(Type.String({ description: 'S3 credentials' })),
  S3_FORCE_PATH_STYLE: Type.Boolean({
    default: false,
    description: 'path-style bucket URLs (MinIO and most self-hosted servers need true)'
  }),
  BLOB_SWEEP_MS: Type.Integer({
    minimum: 10,
    maximum: 86_400_000,
    default: 60_000,
    description: 'how often unreferenced blobs are looked for and removed'
  }),
  EMBEDDING_MODEL: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 200,
      description:
        "the deployment's embedding model, served by EMBEDDING_BASE_URL's /embeddings (unset: an org's choice, else the built-in offline embedder)"
    })
  ),
  EMBEDDING_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description: 'OpenAI-compatible API base for EMBEDDING_MODEL (default OPENAI_BASE_URL)'
    })
  ),
  EMBEDDING_API_KEY: Type.Optional(
    Type.String({ description: 'bearer token for EMBEDDING_BASE_URL (default OPENAI_API_KEY)' })
  ),
  EMBEDDING_WORKER: Type.Boolean({
    default: true,
    description: 'embed memory facts, knowledge records and document chunks in this process'
  }),
  EMBEDDING_BATCH: Type.Integer({
    minimum: 1,
    maximum: 2048,
    default: 64,
    description: 'texts per /embeddings call (and per claim of the embedding worker)'
  }),
  EMBEDDING_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 5,
    description: 'tries of a text before its embedding is failed (a model change or POST .../embed tries again)'
  }),
  EMBEDDING_BACKOFF_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 2_000,
    description: 'wait before a failed embedding is tried again (doubles per attempt, with jitter)'
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
    description: 'how long the worker waits for an /embeddings answer'
  }),
  EMBEDDING_QUERY_TIMEOUT_MS: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    default: 2_000,
    description: "how long a search waits for its query's embedding before it ranks by words alone"
  }),
  EMBEDDING_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description: 'how long claimed embeddings are held before another worker may take them (renewed while working)'
  }),
  EMBEDDING_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 2000,
    description: 'how often an idle embedding worker looks for texts to embed (writes on this instance wake it)'
  }),
  EMBEDDING_MIN_SIMILARITY: Type.Optional(
    Type.Number({
      minimum: -1,
      maximum: 1,
      description: 'the least cosine similarity a match by meaning needs to be a hit (default 0.3)'
    })
  ),
  KNOWLEDGE_WORKER: Type.Boolean({ default: true, description: 'extract knowledge documents in this process' }),
  KNOWLEDGE_CONCURRENCY: Type.Integer({
    minimum: 1,
    maximum: 16,
    default: 1,
    description: 'documents extracted at once per instance'
  }),
  KNOWLEDGE_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description: 'how long a claimed document is held before another worker may take it (renewed while extracting)'
  }),
  KNOWLEDGE_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 2000,
    description: 'how often an idle extraction worker looks for documents'
  }),
  KNOWLEDGE_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 3,
    description: 'claims of a document before it is failed'
  }),
  KNOWLEDGE_BACKOFF_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 5_000,
    description: 'wait before a failed document is tried again (doubles per attempt, with jitter)'
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
    description: 'longest text extraction of one document'
  }),
  KNOWLEDGE_SEARCH_CACHE: Type.Integer({
    minimum: 0,
    maximum: 1_000_000,
    default: 1000,
    description: "search results kept per instance, dropped when the org's knowledge changes (0: no cache)"
  }),
  SECRETS_KEY: Type.Optional(
    Type.String({
      description:
        'the key org secrets are sealed with: 32 random bytes in base64 (openssl rand -base64 32). Unset: a key made once in DATA_DIR/secrets.key on the embedded database; secrets unavailable (503) on Postgres'
    })
  ),
  SECRETS_PREVIOUS_KEYS: Type.Optional(
    Type.String({
      description:
        'comma-separated earlier SECRETS_KEY values: they still open secrets, which are sealed again under SECRETS_KEY in the background'
    })
  ),
  SCHEDULER: Type.Boolean({
    default: true,
    description: 'fire due automations from this instance (every instance may; each tick fires once)'
  }),
  SCHEDULER_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    default: 1000,
    description:
      'how often the scheduler looks for automations another instance changed (its own changes wake it at once)'
  }),
  SCHEDULER_GRACE_MS: Type.Integer({
    minimum: 1000,
    maximum: 3_600_000,
    default: 60_000,
    description: 'a tick later than this when found (no instance ran at its time) counts as missed: catchUp decides'
  }),
  GITHUB_API_URL: Type.String({
    pattern: '^https?://',
    default: 'https://api.github.com',
    description:
      "GitHub REST API base (GitHub Enterprise: https://<host>/api/v3; tests: a local server speaking GitHub's protocol)"
  }),
  GITHUB_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    default: 15_000,
    description: 'longest wait for one GitHub request (then 502 upstream_failed)'
  }),
  SLACK_API_URL: Type.String({
    pattern: '^https?://',
    default: 'https://slack.com/api/',
    description: 'Slack Web API base (auth.test, chat.postMessage); tests point it at a local server'
  }),
  SLACK_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 120_000,
    default: 10_000,
    description: 'longest Slack Web API call'
  }),
  SLACK_OUTBOX: Type.Boolean({
    default: true,
    description:
      'post Slack replies and approval requests from this instance (every instance may; each run gets one reply, each stop for approval one message)'
  }),
  SLACK_OUTBOX_POLL_MS: Type.Integer({
    minimum: 10,
    maximum: 600_000,
    default: 1000,
    description:
      'how often the Slack outboxes look for due replies and approval requests (a run ending or stopping for approval wakes them at once)'
  }),
  SLACK_OUTBOX_LEASE_MS: Type.Integer({
    minimum: 100,
    maximum: 3_600_000,
    default: 60_000,
    description:
      'how long a claimed reply or approval request is held before another instance may take it over (longer than SLACK_TIMEOUT_MS)'
  }),
  SLACK_RETRY_BASE_MS: Type.Integer({
    minimum: 1,
    maximum: 3_600_000,
    default: 2000,
    description:
      'first wait before a failed Slack post (reply or approval request) is tried again; doubles per attempt (at most 10 minutes)'
  }),
  SLACK_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 8,
    description: 'attempts to post a reply or approval request before it is given up (last_error kept)'
  }),
  KNOWLEDGE_EXTRACT_MEMORY_MB: Type.Integer({
    minimum: 32,
    maximum: 16_384,
    default: 512,
    description: 'heap of the extraction child process'
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description:
        'an OTLP/HTTP collector (http://host:4318): traces go to <it>/v1/traces; unset (with the next one unset too): no tracing at all'
    })
  ),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(
    Type.String({
      pattern: '^https?://',
      description:
        'the full URL traces are posted to (OTLP/HTTP, JSON), instead of OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces'
    })
  ),
  OTEL_EXPORTER_OTLP_HEADERS: Type.Optional(
    Type.String({
      description:
        'headers sent with every export, as key=value pairs separated by commas (values percent-encoded), e.g. Authorization=Basic%20…'
    })
  ),
  OTEL_SERVICE_NAME: Type.String({
    minLength: 1,
    default: 'cairn',
    description: "the service.name of this instance's spans"
  }),
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: Type.Boolean({
    default: false,
    description:
      "record prompts, answers, tool arguments and results on spans (the run's secret values redacted); off: only sizes, models and counts"
  }),
  METRICS_TOKEN: Type.Optional(
    Type.String({
      minLength: 16,
      description:
        'GET /metrics answers a caller with Authorization: Bearer <it> from any address; without it, loopback callers only (others: 404)'
    })
  ),
  METRICS_PER_ORG: Type.Boolean({
    default: false,
    description: 'label run, token and tool metrics with the organization id (one series per org: for a few orgs only)'
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
