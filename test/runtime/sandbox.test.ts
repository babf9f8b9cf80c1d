import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { probeBubblewrap } from '../../src/runtime/bubblewrap.js'
import { LocalSandboxProvider } from '../../src/runtime/local-sandbox.js'
import { SandboxError, SandboxManager } from '../../src/runtime/sandbox.js'
import type { Teardown } from '../helper.js'

const quiet = { warn() {}, info() {} }

async function setup(t: Teardown, confinement: 'auto' | 'none' = 'auto') {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-sandbox-'))
  const outside = await mkdtemp(join(tmpdir(), 'cairn-outside-'))
  t.teardown(() =>
    Promise.all([rm(dataDir, { recursive: true, force: true }), rm(outside, { recursive: true, force: true })])
  )
  await writeFile(join(outside, 'secret.txt'), 'top-secret-value')
  const provider = new LocalSandboxProvider({
    dataDir,
    confinement,
    unconfined: true,
    network: false,
    execTimeoutMs: 10_000,
    outputMaxBytes: 64 * 1024,
    fileMaxBytes: 64 * 1024,
    log: quiet
  })
  const sandbox = await provider.create({ orgId: 'org-a', threadId: 'thread-1' })
  t.teardown(() => sandbox.destroy())
  return { provider, sandbox, dataDir, outside, workspace: join(dataDir, 'sandboxes', 'org-a', 'thread-1') }
}

const bwrap = probeBubblewrap()

t.test(
  'a command cannot read a file outside its workspace (bubblewrap)',
  { skip: embeddedPassOnly || (bwrap.ok ? false : `bubblewrap cannot confine here: ${bwrap.reason}`) },
  async (t) => {
    const { provider, sandbox, outside, workspace } = await setup(t)
    t.equal(provider.confinement, 'bwrap')
    const secret = join(outside, 'secret.txt')
    const read = await sandbox.exec(`cat ${secret}`)
    t.not(read.exitCode, 0, 'cat fails')
    t.notMatch(read.stdout, /top-secret-value/, 'the secret is not printed')
    const write = await sandbox.exec(`echo pwned > ${join(outside, 'new.txt')}`)
    t.not(write.exitCode, 0)
    t.notOk(existsSync(join(outside, 'new.txt')), 'nothing written outside')
    // its own workspace is writable, and is its home
    const own = await sandbox.exec('echo mine > own.txt && cat own.txt && pwd')
    t.equal(own.exitCode, 0)
    t.match(own.stdout, /^mine\n/)
    t.equal(await readFile(join(workspace, 'own.txt'), 'utf8'), 'mine\n')
    t.equal((await sandbox.exec('cat /etc/hostname > /dev/null')).exitCode, 0, 'system files stay readable')
    const net = await sandbox.exec('cat /proc/net/dev')
    t.notMatch(net.stdout, /eth0|ens|enp|veth/, 'no network device but loopback without SANDBOX_NETWORK')
  }
)

t.test('commands never see the service environment', { skip: embeddedPassOnly }, async (t) => {
  process.env.CAIRN_TEST_SECRET = 'env-secret-value'
  t.teardown(() => {
    delete process.env.CAIRN_TEST_SECRET
  })
  for (const mode of ['auto', 'none'] as const) {
    const { sandbox } = await setup(t, mode)
    const env = await sandbox.exec('env')
    t.equal(env.exitCode, 0)
    t.notMatch(env.stdout, /env-secret-value/, `${mode}: no service variables`)
    t.match(env.stdout, /PATH=/)
  }
})

t.test('the time limit kills a long command and its children', { skip: embeddedPassOnly }, async (t) => {
  for (const mode of ['auto', 'none'] as const) {
    const { sandbox } = await setup(t, mode)
    const result = await sandbox.exec('sleep 60 & sleep 60', { timeoutMs: 300 })
    t.equal(result.timedOut, true, `${mode}: timed out`)
    t.equal(result.exitCode, null)
    t.equal(result.signal, 'SIGKILL')
  }
})

t.test('an aborted command is killed, whenever the abort comes', { skip: embeddedPassOnly }, async (t) => {
  const { sandbox } = await setup(t)
  // aborted at once, after a turn of the event loop and a few milliseconds into bubblewrap's
  // setup (where its child has not yet asked to die with it): killed each time, well before
  // the time limit
  let late = 0
  for (let i = 0; i < 60; i++) {
    const controller = new AbortController()
    const running = sandbox.exec('sleep 60', { signal: controller.signal, timeoutMs: 20_000 })
    if (i % 3 === 1) await new Promise((resolve) => setImmediate(resolve))
    if (i % 3 === 2) await new Promise((resolve) => setTimeout(resolve, i % 7))
    controller.abort()
    const result = await running
    if (result.signal !== 'SIGKILL' || result.timedOut) late++
  }
  t.equal(late, 0, 'every aborted command was killed by its abort')
})

t.test('output is cut at the limit', { skip: embeddedPassOnly }, async (t) => {
  const { sandbox } = await setup(t)
  const result = await sandbox.exec('head -c 100000 /dev/zero | tr "\\0" x; echo err >&2', { maxOutputBytes: 100 })
  t.equal(result.stdout, 'x'.repeat(100))
  t.equal(result.stderr, 'err\n')
  t.equal(result.truncated, true)
  t.equal(result.exitCode, 0)
})

for (const mode of ['auto', 'none'] as const)
  t.test(`files (${mode}): write, read, list inside the workspace`, async (t) => {
    const { sandbox, workspace } = await setup(t, mode)
    t.same(await sandbox.writeFile('notes/a.txt', 'hello ✓'), { bytes: Buffer.byteLength('hello ✓') })
    t.equal(await readFile(join(workspace, 'notes', 'a.txt'), 'utf8'), 'hello ✓')
    t.same(await sandbox.readFile('./notes//a.txt'), { content: 'hello ✓', size: 9, truncated: false })
    t.same(await sandbox.readFile('notes/a.txt', 5), { content: 'hello', size: 9, truncated: true })
    t.same(await sandbox.listFiles(''), [{ name: 'notes', type: 'dir', size: 0 }])
    t.same(await sandbox.listFiles('notes'), [{ name: 'a.txt', type: 'file', size: 9 }])
    // a link that stays inside the workspace is fine
    await symlink('notes', join(workspace, 'inner'))
    t.equal((await sandbox.readFile('inner/a.txt')).content, 'hello ✓')
    if (mode === 'auto' && bwrap.ok) {
      // an absolute link is read as the sandbox sees it, where the workspace is /workspace
      await symlink('/workspace/notes', join(workspace, 'inner-abs'))
      t.equal((await sandbox.readFile('inner-abs/a.txt')).content, 'hello ✓')
      t.same(await sandbox.listFiles('inner-abs'), [{ name: 'a.txt', type: 'file', size: 9 }])
    }
    await t.rejects(sandbox.readFile('missing.txt'), { code: 'not_found' })
    await t.rejects(sandbox.readFile('notes'), { code: 'not_a_file' })
    await t.rejects(sandbox.writeFile('big.txt', 'x'.repeat(70 * 1024)), { code: 'too_large' })
    // a FIFO is neither read nor written (either would wait for a peer forever)
    t.equal((await sandbox.exec('mkfifo pipe')).exitCode, 0)
    await t.rejects(sandbox.readFile('pipe'), { code: 'not_a_file' })
    await t.rejects(sandbox.writeFile('pipe', 'x'), { code: 'not_a_file' })
    await t.rejects(sandbox.writeFile('notes', 'x'), { code: 'not_a_file' }, 'nor is a folder replaced')
    t.same(
      (await sandbox.listFiles('')).map((e) => [e.name, e.type]),
      [
        ['inner', 'symlink'],
        ...(mode === 'auto' && bwrap.ok ? [['inner-abs', 'symlink']] : []),
        ['notes', 'dir'],
        ['pipe', 'other']
      ]
    )
  })

for (const mode of ['auto', 'none'] as const)
  t.test(`path escapes (${mode}) are rejected: .., absolute paths, symlinks out`, async (t) => {
    const { sandbox, outside, workspace } = await setup(t, mode)
    for (const path of [
      '../secret.txt',
      'a/../../secret.txt',
      '..',
      '/etc/passwd',
      join(outside, 'secret.txt'),
      '~/x',
      'a\0b',
      ''
    ]) {
      await t.rejects(sandbox.readFile(path), SandboxError, `read ${JSON.stringify(path)}`)
      await t.rejects(sandbox.writeFile(path, 'x'), SandboxError, `write ${JSON.stringify(path)}`)
    }
    await t.rejects(sandbox.listFiles('../..'), { code: 'invalid_path' })

    await mkdir(workspace, { recursive: true })
    // links resolve in the sandbox's view: a host path outside is not there at all (bubblewrap),
    // or is refused as leaving the workspace (unconfined); a system path there is refused
    await symlink(outside, join(workspace, 'out'))
    await symlink(join(outside, 'secret.txt'), join(workspace, 'leak.txt'))
    await symlink('/etc', join(workspace, 'etc'))
    await symlink('../..', join(workspace, 'up'))
    const refused = { name: 'SandboxError', code: /^(invalid_path|not_found)$/ }
    await t.rejects(sandbox.readFile('out/secret.txt'), refused, 'a directory link out')
    await t.rejects(sandbox.readFile('leak.txt'), refused, 'a file link out')
    await t.rejects(sandbox.listFiles('out'), refused)
    await t.rejects(sandbox.writeFile('out/new.txt', 'x'), refused)
    await t.rejects(sandbox.writeFile('leak.txt', 'overwritten'), refused)
    await t.rejects(sandbox.writeFile('out/sub/new.txt', 'x'), refused)
    await t.rejects(sandbox.readFile('etc/passwd'), { code: 'invalid_path' })
    await t.rejects(sandbox.listFiles('etc'), { code: 'invalid_path' })
    await t.rejects(sandbox.listFiles('up'), { code: 'invalid_path' })
    await t.rejects(sandbox.writeFile('up/x.txt', 'x'), { code: 'invalid_path' })
    t.notOk(existsSync(join(outside, 'new.txt')))
    t.notOk(existsSync(join(outside, 'sub')))
    t.equal(await readFile(join(outside, 'secret.txt'), 'utf8'), 'top-secret-value', 'the outside file is unchanged')
  })

t.test('hostile org or thread ids never become paths', { skip: embeddedPassOnly }, async (t) => {
  const { provider } = await setup(t)
  await t.rejects(provider.create({ orgId: '..', threadId: 'x' }), { code: 'invalid_path' })
  await t.rejects(provider.create({ orgId: 'org', threadId: 'a/b' }), { code: 'invalid_path' })
})

t.test('the manager reuses one sandbox per thread and reaps idle ones', { skip: embeddedPassOnly }, async (t) => {
  const { provider } = await setup(t)
  const manager = new SandboxManager(provider, { idleMs: 60_000 })
  t.teardown(() => manager.close())
  const a = await manager.acquire({ orgId: 'org-a', threadId: 't1' })
  const again = await manager.acquire({ orgId: 'org-a', threadId: 't1' })
  t.equal(a.sandbox, again.sandbox, 'one sandbox per (org, thread)')
  const other = await manager.acquire({ orgId: 'org-b', threadId: 't1' })
  t.not(other.sandbox, a.sandbox, 'orgs never share')
  other.release()
  a.release()
  t.equal(await manager.reapIdle(Date.now() + 120_000), 1, 'only the unleased sandbox is reaped')
  t.equal(other.sandbox.destroyed, true)
  t.equal(a.sandbox.destroyed, false, 'a leased sandbox stays')
  again.release()
  t.equal(await manager.reapIdle(Date.now() + 120_000), 1)
  t.equal(a.sandbox.destroyed, true)
  t.equal(manager.size, 0)
  await t.rejects(a.sandbox.exec('true'), { code: 'destroyed' })
  const fresh = await manager.acquire({ orgId: 'org-a', threadId: 't1' })
  t.not(fresh.sandbox, a.sandbox, 'a reaped sandbox is made again on demand')
  fresh.release()
})

t.test('destroy with purge removes the workspace', { skip: embeddedPassOnly }, async (t) => {
  const { sandbox, workspace } = await setup(t)
  await sandbox.writeFile('x.txt', 'x')
  await sandbox.destroy({ purge: true })
  t.notOk(existsSync(workspace))
})
