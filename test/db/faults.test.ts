import { once } from 'node:events'
import { type AddressInfo, createConnection, createServer } from 'node:net'
import { setImmediate as immediate } from 'node:timers/promises'
import { DrizzleQueryError } from 'drizzle-orm/errors'
import postgres from 'postgres'
import t from 'tap'
import { describeError } from '../../plugins/errors.js'
import { users } from '../../src/auth/tables.js'
import { failureSentence, isDatabaseUnavailable, serializeError } from '../../src/db/faults.js'
import { createTestDatabase, uniqueEmail } from '../helper.js'

const fault = (code: string, message = 'gone') => Object.assign(new Error(message), { code })

t.test(
  'connection-level failures, bare or wrapped by drizzle, answer 503 database_unavailable with Retry-After',
  async (t) => {
    const unavailable = [
      fault('ECONNREFUSED'),
      fault('ECONNRESET'),
      fault('EPIPE'),
      fault('ETIMEDOUT'),
      fault('CONNECTION_CLOSED'),
      fault('CONNECTION_ENDED'),
      fault('CONNECTION_DESTROYED'),
      fault('CONNECT_TIMEOUT'),
      fault('08006'),
      fault('08001'),
      fault('57P01'),
      fault('57P02'),
      fault('57P03'),
      fault('53300'),
      new DrizzleQueryError(
        'select * from runs where org_id = $1',
        ['org-secret'],
        fault('57P01', 'terminating connection due to administrator command')
      )
    ]
    for (const err of unavailable) {
      const reply = describeError(err)
      t.equal(reply.status, 503, String((err as { code?: string }).code ?? err.message))
      t.same(reply.body, { error: 'database_unavailable', message: 'the database is unavailable; retry shortly' })
      t.same(reply.headers, { 'retry-after': '2' })
    }
    // a query the database refused is a bug, not an outage, and says nothing of its SQL
    const refused = describeError(
      new DrizzleQueryError('insert into users values ($1)', ['a@b.c'], fault('23505', 'duplicate key'))
    )
    t.same(
      { status: refused.status, body: refused.body },
      { status: 500, body: { error: 'internal_error', message: 'internal error' } }
    )
    t.notOk(isDatabaseUnavailable(new Error('plain')))
    t.notOk(isDatabaseUnavailable(null))
  }
)

t.test('a failed insert is logged without its SQL or parameters (the email and the password hash)', async (t) => {
  const { database } = await createTestDatabase(t)
  const email = uniqueEmail('leak')
  const hash = '$argon2id$v=19$m=19456,t=2,p=1$c2VjcmV0c2FsdA$c2VjcmV0aGFzaHZhbHVl'
  const user = { id: '01a00000-0000-7000-8000-0000000000aa', email, name: 'Leak Test', passwordHash: hash }
  await database.db.insert(users).values(user)
  const err = await database.db
    .insert(users)
    .values({ ...user, id: '01a00000-0000-7000-8000-0000000000ab' })
    .then(
      () => null,
      (e: unknown) => e
    )
  t.ok(err instanceof DrizzleQueryError, 'drizzle wraps the driver error')
  t.match((err as Error).message, email, 'whose message carries the parameters (what must not be logged)')
  const logged = JSON.stringify(serializeError(err))
  t.notMatch(logged, email)
  t.notMatch(logged, hash)
  t.notMatch(logged, /insert into|params:/i)
  t.match(
    JSON.parse(logged),
    { type: 'DrizzleQueryError', message: 'database query failed', cause: { code: '23505' } },
    'the driver error stays, by its code'
  )
})

t.test(
  'postgres.js (patched): a backend killed under a transaction fails its queries, never the process',
  {
    skip: process.env.DATABASE_URL ? false : 'needs real Postgres (DATABASE_URL)'
  },
  async (t) => {
    const { url } = await createTestDatabase(t)
    const sql = postgres(url!, { max: 2, onnotice: () => {} })
    const killer = postgres(url!, { max: 1, onnotice: () => {} })
    t.teardown(async () => {
      await sql.end({ timeout: 1 })
      await killer.end({ timeout: 1 })
    })
    const uncaught: unknown[] = []
    const record = (err: unknown) => uncaught.push(err)
    process.on('uncaughtException', record)
    t.teardown(() => process.off('uncaughtException', record))

    // porsager/postgres#1208, by begin(): the ROLLBACK after the failed query was written to the null socket
    let pid: number | null = null
    const tx = sql.begin(async (q) => {
      pid = (await q`select pg_backend_pid() as pid`)[0]!.pid as number
      await q`select pg_sleep(5)`
    })
    // handled from the start: the transaction may fail before the killer hears its answer
    const txOutcome = tx.then(
      () => null,
      (e: unknown) => e
    )
    while (pid === null) await new Promise((resolve) => setTimeout(resolve, 10))
    await killer`select pg_terminate_backend(${pid})`
    const txError = await txOutcome
    t.ok(
      isDatabaseUnavailable(txError),
      `the transaction fails as the connection closed (${(txError as { code?: string })?.code})`
    )

    // Not covered: a second query on a dead *reserved* connection (sql.reserve()) hangs even
    // with the patch. The service never reserves connections, so it never meets this.
    for (let i = 0; i < 5; i++) await immediate()
    t.same(uncaught, [], 'nothing was thrown outside a query')
    t.same(await sql`select 1 as ok`, [{ ok: 1 }], 'the pool goes on working')
  }
)

t.test(
  "postgres.js (patched): a transaction whose connection closed fails its later queries, never running them on the pool's next connection",
  {
    skip: process.env.DATABASE_URL ? false : 'needs real Postgres (DATABASE_URL)'
  },
  async (t) => {
    const { url } = await createTestDatabase(t)
    // one connection: the pool's next query reconnects the very connection the transaction had
    const sql = postgres(url!, { max: 1, onnotice: () => {} })
    const killer = postgres(url!, { max: 1, onnotice: () => {} })
    t.teardown(async () => {
      await sql.end({ timeout: 1 })
      await killer.end({ timeout: 1 })
    })
    const unhandled: unknown[] = []
    const record = (err: unknown) => unhandled.push(err)
    process.on('unhandledRejection', record)
    t.teardown(() => process.off('unhandledRejection', record))

    // porsager/postgres#1215: the callback goes on after its connection closed (here it awaited something else)
    let pid: number | null = null
    let goOn!: () => void
    const paused = new Promise<void>((resolve) => (goOn = resolve))
    let late: Promise<unknown> | null = null
    const tx = sql.begin(async (q) => {
      pid = (await q`select pg_backend_pid() as pid`)[0]!.pid as number
      await paused
      late = q`select pg_backend_pid() as pid`.then((rows) => rows[0]!.pid as number)
      return late
    })
    // handled from the start: the transaction may fail before the killer hears its answer
    const txOutcome = tx.then(
      () => null,
      (e: unknown) => e
    )
    while (pid === null) await new Promise((resolve) => setTimeout(resolve, 10))
    await killer`select pg_terminate_backend(${pid})`
    const txError = await txOutcome
    t.ok(isDatabaseUnavailable(txError), 'the transaction fails as its connection closed')
    // the pool reconnects its one connection for another query
    const [other] = await sql`select pg_backend_pid() as pid`
    t.not(other!.pid, pid, 'a new backend')

    goOn()
    while (late === null) await new Promise((resolve) => setTimeout(resolve, 10))
    const lateOutcome = await (late as Promise<unknown>).then(
      (ran: unknown) => `ran on backend ${String(ran)}, outside the transaction`,
      (e: unknown) => (e as { code?: string }).code
    )
    t.equal(lateOutcome, 'CONNECTION_CLOSED', "the callback's later query fails with the transaction's close")
    for (let i = 0; i < 5; i++) await immediate()
    t.same(unhandled, [], 'no rejection left unhandled')
    t.same(await sql`select 1 as ok`, [{ ok: 1 }], 'the pool goes on working')
  }
)

t.test(
  'postgres.js (patched): a connection reset while it reads the array types fails the query that opened it, never the process',
  {
    skip: process.env.DATABASE_URL ? false : 'needs real Postgres (DATABASE_URL)'
  },
  async (t) => {
    const { url } = await createTestDatabase(t)
    // porsager/postgres#1192: every new connection first asks for the array types, from a
    // promise nobody held; reset right then, its rejection was unhandled (a process ends on it)
    const target = new URL(url!)
    let resets = 0
    const proxy = createServer((client) => {
      const upstream = createConnection({ host: target.hostname, port: Number(target.port || 5432) })
      const cut = () => {
        client.resetAndDestroy()
        upstream.destroy()
      }
      client.on('error', cut)
      upstream.on('error', cut)
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
      upstream.pipe(client)
      client.on('data', (chunk: Buffer) => {
        if (resets === 0 && chunk.includes('typcategory')) {
          resets++
          cut()
        } else upstream.write(chunk)
      })
    })
    proxy.listen(0, '127.0.0.1')
    await once(proxy, 'listening')
    t.teardown(() => new Promise((resolve) => proxy.close(resolve)))
    const through = new URL(url!)
    through.host = `127.0.0.1:${(proxy.address() as AddressInfo).port}`
    const sql = postgres(through.toString(), { max: 1, onnotice: () => {} })
    t.teardown(() => sql.end({ timeout: 1 }))
    const unhandled: unknown[] = []
    const record = (err: unknown) => unhandled.push(err)
    process.on('unhandledRejection', record)
    t.teardown(() => process.off('unhandledRejection', record))

    const first = await sql`select 1 as ok`.then(
      () => 'answered',
      (e: unknown) => (e as { code?: string }).code
    )
    t.equal(resets, 1, 'the connection was reset as it read the types')
    t.ok(
      isDatabaseUnavailable(Object.assign(new Error(), { code: first })),
      `the query fails as the connection did (${first})`
    )
    for (let i = 0; i < 5; i++) await immediate()
    t.same(unhandled, [], 'no rejection left unhandled')
    t.same(await sql`select 1 as ok`, [{ ok: 1 }], 'the pool goes on working')
  }
)

t.test('failures as stored sentences: no SQL, values, hosts, ports or paths', async (t) => {
  const lost = Object.assign(new Error('write CONNECTION_CLOSED db.internal.example:5432'), {
    code: 'CONNECTION_CLOSED',
    address: 'db.internal.example',
    port: 5432
  })
  t.equal(failureSentence(lost), 'the database was unavailable')
  t.equal(
    failureSentence(
      new DrizzleQueryError(
        'insert into t values ($1)',
        ['secret value'],
        fault('23514', 'new row violates check constraint')
      )
    ),
    'a database query failed (SQLSTATE 23514)'
  )
  t.equal(failureSentence(new DrizzleQueryError('select 1', [], new Error('odd'))), 'a database query failed')
  t.equal(
    failureSentence(
      Object.assign(new Error("ENOSPC: no space left on device, write '/data/blobs/x'"), {
        code: 'ENOSPC',
        syscall: 'write',
        path: '/data/blobs/x'
      })
    ),
    'the disk is full'
  )
  t.equal(
    failureSentence(
      Object.assign(new Error("EACCES: permission denied, open '/data/x'"), {
        code: 'EACCES',
        syscall: 'open',
        path: '/data/x'
      })
    ),
    'a system call failed (open EACCES)'
  )
  // a socket of something other than the database is not the database
  t.equal(
    failureSentence(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', syscall: 'read' })),
    'a system call failed (read ECONNRESET)'
  )
  t.equal(
    failureSentence(new Error('the memory service at http://mem0.internal:8000 is unreachable')),
    'the memory service at http://(server) is unreachable'
  )
  const logged = JSON.stringify(
    serializeError(
      Object.assign(new Error('connect ECONNREFUSED 10.1.2.3:5432'), {
        code: 'ECONNREFUSED',
        syscall: 'connect',
        address: '10.1.2.3',
        port: 5432
      })
    )
  )
  t.notMatch(logged, /10\.1\.2\.3|5432/, 'the log line names no host or port')
  t.match(JSON.parse(logged), { code: 'ECONNREFUSED', message: 'connect ECONNREFUSED (server)' })
})
