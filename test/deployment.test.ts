import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import t from 'tap'
import WebSocket from 'ws'
import { startLocalS3 } from './artifacts/s3-server.js'
import { createTestDatabase, type Teardown } from './helper.js'
import { SseClient, eventually } from './runs/sse-client.js'
import { shellCall, startToolModel } from './runs/tool-model.js'
import { startServer, type Started } from './server-process.js'

/**
 * The deployment as users run it: three real server processes on one Postgres, bytes in
 * S3 (the local S3 server), behind HAProxy on loopback (round-robin, no sticky sessions).
 * A thread's runs land on different instances and each sees the files the previous ones
 * wrote; a terminal through the proxy; an event stream resumed through the proxy after
 * its instance was killed; the sign-in limit holds at its number; kill -9 of the instance
 * running a run loses nothing. Postgres half of the suite only (the embedded database is
 * one process by design).
 */

const HAPROXY = spawnSync('sh', ['-c', 'command -v haproxy'], { encoding: 'utf8' }).stdout.trim()
const skip = !process.env.DATABASE_URL
  ? 'several instances share a database only with Postgres (DATABASE_URL): the Postgres half of the suite'
  : HAPROXY === ''
    ? 'haproxy is not installed (apt-get install haproxy)'
    : false

const ACCOUNT_LIMIT = 5

async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  await once(server, 'close')
  return port
}

interface Instance {
  name: string
  port: number
  dataDir: string
  process: Started | null
}

/** One command to HAProxy's runtime API (its admin socket). */
async function haproxyCommand(socket: string, command: string): Promise<string> {
  const conn = createConnection(socket)
  await once(conn, 'connect')
  conn.end(`${command}\n`)
  let out = ''
  conn.on('data', (chunk: Buffer) => {
    out += chunk.toString()
  })
  await once(conn, 'close')
  return out
}

async function startProxy(t: Teardown, dir: string, instances: Instance[]) {
  const port = await freePort()
  const socket = join(dir, 'haproxy.sock')
  const config = join(dir, 'haproxy.cfg')
  writeFileSync(
    config,
    `
global
  stats socket ${socket} mode 600 level admin
defaults
  mode http
  timeout connect 1s
  # SSE streams and terminals stay open: no idle cut from the proxy (the service sends heartbeats)
  timeout client 1h
  timeout server 1h
  timeout tunnel 1h
  option redispatch
  retries 3
frontend api
  bind 127.0.0.1:${port}
  option forwardfor
  default_backend cairn
backend cairn
  balance roundrobin
  option httpchk GET /api/health?ready=1
  # a killed instance refuses the check at once; a busy one may answer it late (the check's
  # timeout is otherwise inter's 200 ms, and a loaded machine then takes every instance out)
  timeout check 5s
  http-response set-header x-served-by %s
${instances.map((i) => `  server ${i.name} 127.0.0.1:${i.port} check inter 200 fall 1 rise 1`).join('\n')}
`
  )
  const proxy = spawn(HAPROXY, ['-f', config, '-db'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  proxy.stdout.on('data', (c) => {
    output += c
  })
  proxy.stderr.on('data', (c) => {
    output += c
  })
  const exited = once(proxy, 'exit')
  t.teardown(async () => {
    proxy.kill('SIGKILL')
    await exited
  })
  const url = `http://127.0.0.1:${port}`
  await eventually(async () => (await fetch(`${url}/api/health`).catch(() => null))?.status === 200, 30_000).catch(
    () => {
      throw new Error(`haproxy did not answer: ${output}`)
    }
  )
  return { url, admin: (command: string) => haproxyCommand(socket, command) }
}

t.test('three instances behind HAProxy on one Postgres and one S3', { skip }, async (t) => {
  const s3 = await startLocalS3(t)
  if ('skip' in s3) {
    t.comment(`skipped: ${s3.skip}`)
    return
  }
  const { url: databaseUrl } = await createTestDatabase(t)
  const sql = postgres(databaseUrl!, { max: 1, onnotice: () => {} })
  t.teardown(() => sql.end())
  const model = await startToolModel(t)
  const dir = mkdtempSync(join(tmpdir(), 'cairn-deploy-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }))

  const env = {
    NODE_ENV: 'development',
    ALLOW_DEV_ORG: 'false',
    DATABASE_URL: databaseUrl!,
    ARTIFACT_STORE: 's3',
    S3_ENDPOINT: s3.endpoint,
    S3_BUCKET: s3.bucket,
    S3_ACCESS_KEY_ID: 'S3RVER',
    S3_SECRET_ACCESS_KEY: 'S3RVER',
    S3_FORCE_PATH_STYLE: 'true',
    OPENAI_BASE_URL: model.url,
    MODELS: 'tool-model',
    SANDBOX_UNCONFINED: 'true',
    RUN_WORKER_CONCURRENCY: '2',
    RUN_POLL_MS: '100',
    RUN_LEASE_MS: '3000',
    RUN_SWEEP_MS: '500',
    SANDBOX_WORKSPACE_LEASE_MS: '3000',
    AUTH_RATE_LIMIT_PER_ACCOUNT: String(ACCOUNT_LIMIT),
    TRUST_PROXY: '127.0.0.1',
    SSE_HEARTBEAT_MS: '1000'
  }
  const instances: Instance[] = []
  for (const name of ['a', 'b', 'c'])
    instances.push({ name, port: await freePort(), dataDir: join(dir, name), process: null })
  const start = async (instance: Instance) => {
    instance.process = await startServer({ ...env, PORT: String(instance.port), DATA_DIR: instance.dataDir })
  }
  t.teardown(async () => {
    for (const i of instances) {
      i.process?.kill('SIGKILL')
      await i.process?.exit
    }
  })
  await Promise.all(instances.map(start))
  const proxy = await startProxy(t, dir, instances)

  // through the proxy only, as a browser would
  let cookie = ''
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${proxy.url}${path}`, {
      method,
      headers: { cookie, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? null : JSON.stringify(body)
    })
    const setCookie = res.headers.get('set-cookie')
    if (setCookie) cookie = setCookie.split(';')[0]!
    return {
      status: res.status,
      servedBy: res.headers.get('x-served-by'),
      body: (await res.json().catch(() => null)) as any,
      headers: res.headers
    }
  }
  const email = `deploy-${Date.now()}@example.com`
  t.equal(
    (await call('POST', '/api/auth/sign-up', { email, password: 'deploy password', name: 'Deployer' })).status,
    201
  )
  const org = await call('POST', '/api/auth/organizations', { name: 'Deployed' })
  t.equal(org.status, 201)
  const orgId = org.body.organization.id as string
  t.equal((await call('PUT', '/api/tools/policies/shell', { mode: 'auto' })).status, 200)
  const finished = async (id: string) =>
    eventually(async () => {
      const { body } = await call('GET', `/api/runs/${id}?wait=20`)
      return ['succeeded', 'failed', 'cancelled'].includes(body.run.status) ? body.run : null
    }, 60_000)
  const shellResult = async (runId: string) => {
    const [row] = await sql<
      Array<{ data: { content: string } }>
    >`select data from run_events where run_id = ${runId} and type = 'tool.result' order by id limit 1`
    return row?.data.content ?? ''
  }
  /** the instance whose copy of the thread's workspace has this line last in log.txt (a command just wrote it there) */
  const instanceWith = (thread: string, line: string) =>
    instances.find((i) => {
      const log = (() => {
        try {
          return readFileSync(join(i.dataDir, 'sandboxes', orgId, thread, 'log.txt'), 'utf8')
        } catch {
          return ''
        }
      })()
      return log.endsWith(`\n${line}\n`) || log === `${line}\n`
    }) as Instance

  await t.test(
    "a thread's five runs land on different instances and each sees the files the previous ones wrote",
    async (t) => {
      let root: string | undefined
      let previous: Instance | null = null
      const landed: string[] = []
      for (let n = 1; n <= 5; n++) {
        // the instance that ran the previous run sits this one out (drained at the proxy, paused), so the next lands
        // elsewhere
        if (previous) {
          await proxy.admin(`disable server cairn/${previous.name}`)
          process.kill(previous.process!.pid, 'SIGSTOP')
        }
        model.script.push(shellCall(`echo ${n} >> log.txt && cat log.txt`), { text: `run ${n} done` })
        const created = await call('POST', '/api/runs', {
          prompt: `run ${n}`,
          engine: 'openai',
          ...(root ? { rootRunId: root } : {})
        })
        t.equal(created.status, 201)
        const run = await finished(created.body.run.id)
        t.match(run, { status: 'succeeded', output: `run ${n} done` })
        const output = await shellResult(run.id)
        t.match(
          output,
          new RegExp(`\\n${Array.from({ length: n }, (_, i) => i + 1).join('\\n')}\\n$`),
          `run ${n} sees every line written before it`
        )
        root ??= created.body.run.id as string
        const ranOn = instanceWith(root, String(n))
        if (previous) {
          t.not(ranOn.name, previous.name, `run ${n} ran on another instance than run ${n - 1}`)
          process.kill(previous.process!.pid, 'SIGCONT')
          await proxy.admin(`enable server cairn/${previous.name}`)
        }
        landed.push(ranOn.name)
        previous = ranOn
      }
      t.ok(new Set(landed).size >= 2, `runs landed on ${landed.join(', ')}`)
      const [row] = await sql<
        Array<{ revision: number; holder: string | null }>
      >`select revision, holder from thread_workspaces where thread_id = ${root!}`
      t.match(row, { revision: 5, holder: null }, 'five saves, nothing held')
      t.ok((await s3.keys()).length > 0, 'the archives are in S3')

      await t.test('a terminal through the proxy sees and changes the same workspace', async (t) => {
        const ws = new WebSocket(`${proxy.url.replace('http:', 'ws:')}/api/runs/${root}/terminal`, {
          headers: { cookie }
        })
        let output = ''
        ws.on('message', (data: Buffer, isBinary) => {
          if (isBinary) output += data.toString()
        })
        const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)))
        await once(ws, 'open')
        ws.send(Buffer.from('echo from-terminal > term.txt && wc -l < log.txt && exit\r'), { binary: true })
        t.equal(await closed, 1000, 'the shell exited after its files were saved')
        t.match(output, /\b5\r?\n/, 'the terminal saw the five lines')
        const [after] = await sql<
          Array<{ revision: number }>
        >`select revision from thread_workspaces where thread_id = ${root!}`
        t.equal(after!.revision, 6)
      })

      await t.test('an event stream resumed through the proxy after its instance is killed', async (t) => {
        let answer!: () => void
        const held = new Promise<void>((resolve) => (answer = resolve))
        t.teardown(() => answer())
        model.script.push({ text: 'the stream went on', after: held })
        const created = await call('POST', '/api/runs', { prompt: 'stream me', engine: 'openai', rootRunId: root })
        const runId = created.body.run.id as string
        const first = await SseClient.open(`${proxy.url}/api/runs/${runId}/events`, { headers: { cookie } })
        t.equal(first.status, 200)
        const streaming = instances.find((i) => i.name === first.headers['x-served-by'])!
        t.ok(streaming, 'the proxy names the instance that streams')
        await first.until((c) => c.events('run.started').length > 0, 30_000)
        const lastId = first.frames.filter((f) => f.id !== undefined).at(-1)!.id!
        streaming.process!.kill('SIGKILL')
        await streaming.process!.exit
        first.close()
        answer()

        const resumed = await SseClient.open(`${proxy.url}/api/runs/${runId}/events`, {
          headers: { cookie, 'last-event-id': lastId }
        })
        t.equal(resumed.status, 200)
        t.not(resumed.headers['x-served-by'], streaming.name, 'another instance took the stream over')
        await resumed.until((c) => c.events('end').length > 0, 60_000)
        const ids = [...first.frames, ...resumed.frames].filter((f) => f.id !== undefined).map((f) => Number(f.id))
        const stored = (
          await sql<Array<{ id: string }>>`select id from run_events where run_id = ${runId} order by id`
        ).map((r) => Number(r.id))
        t.same(
          [...new Set(ids)].sort((x, y) => x - y),
          stored,
          'every stored event shown once the stream resumed, none missing'
        )
        t.same(
          resumed.frames
            .filter((f) => f.id !== undefined)
            .map((f) => Number(f.id))
            .filter((id) => id <= Number(lastId)),
          [],
          'nothing shown twice'
        )
        resumed.close()
        await finished(runId)
        // back to three instances: the killed one starts again on its disk and port
        await start(streaming)
        await eventually(
          async () =>
            (await proxy.admin('show servers state cairn')).split('\n').filter((l) => / 2 /.test(l)).length === 3,
          30_000
        ).catch(() => {})
      })

      await t.test(
        'kill -9 of the instance running a run loses nothing; the next run gets what was last saved',
        async (t) => {
          let answer!: () => void
          const held = new Promise<void>((resolve) => (answer = resolve))
          t.teardown(() => answer())
          model.script.push(shellCall('echo during-the-kill >> log.txt'), { text: 'never heard', after: held })
          const created = await call('POST', '/api/runs', { prompt: 'die midway', engine: 'openai', rootRunId: root })
          const runId = created.body.run.id as string
          await eventually(async () => (await shellResult(runId)) || null, 60_000)
          // killed while it waits for the model's next answer: that answer (never given) is taken, so
          // the thread's next run gets its own
          await eventually(async () => model.script.length === 0, 60_000)
          const running = instanceWith(root!, 'during-the-kill')
          running.process!.kill('SIGKILL')
          await running.process!.exit
          running.process = null

          const lost = await finished(runId)
          t.match(lost, { status: 'failed', error: 'worker_lost' }, 'the run ends (its lease expired), not hangs')
          const types = (
            await sql<Array<{ type: string }>>`select type from run_events where run_id = ${runId} order by id`
          ).map((r) => r.type)
          t.same(
            types.filter((ty) => ty.startsWith('run.')),
            ['run.queued', 'run.started', 'run.failed'],
            'one end, every event kept'
          )
          t.ok(types.includes('tool.result'), 'what it did before the kill is kept')

          model.script.push(shellCall('cat log.txt term.txt'), { text: 'after the kill' })
          const next = await call('POST', '/api/runs', { prompt: 'what is there', engine: 'openai', rootRunId: root })
          t.match(await finished(next.body.run.id), { status: 'succeeded', output: 'after the kill' })
          t.equal(
            await shellResult(next.body.run.id),
            'exit code 0\n1\n2\n3\n4\n5\nfrom-terminal\n',
            "the last saved workspace, without the dead instance's unsaved line"
          )
          const ends = await sql<
            Array<{ n: string }>
          >`select count(*) as n from run_events e join runs r on r.id = e.run_id
        where r.root_run_id = ${root!} and e.type in ('run.succeeded', 'run.failed', 'run.cancelled')`
          const runsInThread = await sql<
            Array<{ n: string }>
          >`select count(*) as n from runs where root_run_id = ${root!}`
          t.equal(Number(ends[0]!.n), Number(runsInThread[0]!.n), 'every run of the thread ended exactly once')
        }
      )
    }
  )

  await t.test('the sign-in limit holds at its number through the proxy', async (t) => {
    const statuses: number[] = []
    const servers = new Set<string>()
    for (let i = 0; i < ACCOUNT_LIMIT + 3; i++) {
      const res = await fetch(`${proxy.url}/api/auth/sign-in`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email, password: 'not the password' })
      })
      statuses.push(res.status)
      servers.add(res.headers.get('x-served-by') ?? '')
    }
    t.same(statuses, [...Array(ACCOUNT_LIMIT).fill(401), 429, 429, 429])
    t.ok(servers.size >= 2, `answered by ${[...servers].join(', ')}`)
  })
})
