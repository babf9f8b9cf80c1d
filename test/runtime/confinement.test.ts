import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { findExecutable, probeBubblewrap } from '../../src/runtime/bubblewrap.js'
import { gatewaySetup } from './fakes.js'

// The sandbox's confinement seen from the tool gateway: the file tools resolve paths in the
// sandbox's view, whatever a sandboxed process does meanwhile, and sandboxed processes never
// keep the service user's rights.

const ORG = DEV_ORG.id
const bwrap = probeBubblewrap()
const skip = bwrap.ok ? false : `bubblewrap cannot confine here: ${bwrap.reason}`
const root = process.geteuid?.() === 0
const setup = gatewaySetup(t)
const hasDesktop = findExecutable('Xvfb') !== null && findExecutable('x11vnc') !== null

/** Every file under `dir`, as paths relative to it, skipping `sandboxes/` (the workspaces). */
async function hostFiles(dir: string, prefix = ''): Promise<string[]> {
  const found: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = `${prefix}${entry.name}`
    if (path === 'sandboxes') continue
    found.push(path)
    if (entry.isDirectory()) found.push(...(await hostFiles(join(dir, entry.name), `${path}/`)))
  }
  return found.sort()
}

t.test(
  'a directory swapped for ../../.. mid-call never leads a file tool out',
  { skip: embeddedPassOnly || skip },
  async (t) => {
    // the attacker's loop must outlive every call, however slow the machine
    const { app, runId, workspace, dataDir } = await setup({ t, env: { SANDBOX_EXEC_TIMEOUT_MS: '900000' } })
    const gw = app.runtime.gateway
    for (const tool of ['shell', 'write_file']) {
      await app.inject({ method: 'PUT', url: `/api/tools/policies/${tool}`, payload: { mode: 'auto' } })
    }
    // the host file the attack is after, two levels above the workspace's parent: DATA_DIR
    await writeFile(join(dataDir, 'host-only.key'), 'HOST-SECRET')
    await writeFile(join(dataDir, 'host-dir-marker'), '')
    const before = await hostFiles(dataDir)

    // the attacker: `a` is a real directory holding a decoy, then a link to ../../.., and back
    const attack = gw.execute({
      orgId: ORG,
      runId,
      name: 'shell',
      arguments: {
        command: [
          'mkdir d && echo decoy > d/host-only.key && : > d/host-dir-marker && ln -s ../../.. l && touch go',
          // a write_file may create a real `a` in a gap: it goes, so the swapping goes on
          'while [ -e go ]; do rm -rf a; mv -T d a; mv -T a d; mv -T l a; mv -T a l; done 2>/dev/null',
          'echo stopped'
        ].join('\n'),
        timeoutSeconds: 900
      }
    })
    const deadline = Date.now() + 10_000
    while (!existsSync(join(workspace, 'go')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
    t.ok(existsSync(join(workspace, 'go')), 'the swapping loop runs')

    const seen = { read: new Map<string, number>(), list: new Map<string, number>(), write: new Map<string, number>() }
    const count = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1)
    // the unfixed tools leaked 2 to 4 of every 120 to 150 calls: 600 calls would show a dozen
    const calls = 600
    let next = 0
    const worker = async () => {
      while (next < calls) {
        const i = next++
        if (i % 3 === 0) {
          const r = await gw.execute({ orgId: ORG, runId, name: 'read_file', arguments: { path: 'a/host-only.key' } })
          count(seen.read, r.status === 'ok' ? r.content : 'refused')
        } else if (i % 3 === 1) {
          const r = await gw.execute({ orgId: ORG, runId, name: 'list_files', arguments: { path: 'a' } })
          count(
            seen.list,
            r.status === 'ok'
              ? JSON.parse(r.content)
                  .entries.map((e: { name: string }) => e.name)
                  .join(',')
              : 'refused'
          )
        } else {
          const r = await gw.execute({
            orgId: ORG,
            runId,
            name: 'write_file',
            arguments: { path: 'a/written.txt', content: 'from the sandbox' }
          })
          count(seen.write, r.status)
        }
      }
    }
    await Promise.all([worker(), worker(), worker(), worker()])
    await app.runtime.gateway.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'rm -f go' } })
    t.match((await attack).content, /stopped/, 'the loop swapped until the last call')
    t.comment(
      `read_file: ${JSON.stringify([...seen.read])}; list_files: ${JSON.stringify([...seen.list])}; write_file: ${JSON.stringify([...seen.write])}`
    )

    t.same(
      [...seen.read.keys()].filter((k) => k !== 'refused' && k !== 'decoy\n'),
      [],
      'read_file answered only the decoy or a refusal'
    )
    t.ok(seen.read.get('decoy\n'), 'some reads found the decoy')
    // the decoy, or a folder a write made in a gap of the loop
    const decoyListing = /^(host-dir-marker,host-only\.key(,written\.txt)?|(written\.txt)?)$/
    t.same(
      [...seen.list.keys()].filter((k) => k !== 'refused' && !decoyListing.test(k)),
      [],
      'list_files listed only the decoy directory'
    )
    t.same(await hostFiles(dataDir), before, 'no file appeared in DATA_DIR, nor anywhere under it but the workspaces')
    t.equal(await readFile(join(dataDir, 'host-only.key'), 'utf8'), 'HOST-SECRET', 'the host file is unchanged')
    t.ok(seen.write.get('ok'), 'some writes went through, inside the workspace')
  }
)

t.test(
  "workspace links to /etc/passwd, DATA_DIR and another org's workspace are refused by every file tool",
  { skip: embeddedPassOnly || skip },
  async (t) => {
    const { app, runId, workspace, dataDir } = await setup({ t })
    const gw = app.runtime.gateway
    await app.inject({ method: 'PUT', url: '/api/tools/policies/write_file', payload: { mode: 'auto' } })
    await gw.execute({ orgId: ORG, runId, name: 'list_files', arguments: {} })
    const other = join(dataDir, 'sandboxes', 'other-org', 'thread-x')
    await mkdir(other, { recursive: true })
    await writeFile(join(other, 'theirs.txt'), 'OTHER-ORG-FILE')
    await writeFile(join(dataDir, 'host-only.key'), 'HOST-SECRET')
    const links: Record<string, string> = {
      passwd: '/etc/passwd',
      etc: '/etc',
      data: dataDir,
      datakey: join(dataDir, 'host-only.key'),
      otherabs: other,
      otherrel: '../../other-org/thread-x',
      up: '../../..'
    }
    for (const [name, target] of Object.entries(links)) await symlink(target, join(workspace, name))
    const paths = [
      'passwd',
      'etc/passwd',
      'data/host-only.key',
      'datakey',
      'otherabs/theirs.txt',
      'otherrel/theirs.txt',
      'up/host-only.key'
    ]
    for (const path of paths) {
      const read = await gw.execute({ orgId: ORG, runId, name: 'read_file', arguments: { path } })
      t.equal(read.status, 'error', `read_file ${path} is refused`)
      t.notMatch(read.content, /HOST-SECRET|OTHER-ORG-FILE|root:/, `read_file ${path} shows nothing of it`)
    }
    for (const path of ['etc', 'data', 'otherabs', 'otherrel', 'up']) {
      const listed = await gw.execute({ orgId: ORG, runId, name: 'list_files', arguments: { path } })
      t.equal(listed.status, 'error', `list_files ${path} is refused`)
      const written = await gw.execute({
        orgId: ORG,
        runId,
        name: 'write_file',
        arguments: { path: `${path}/planted.txt`, content: 'x' }
      })
      t.equal(written.status, 'error', `write_file ${path}/planted.txt is refused`)
    }
    for (const path of ['passwd', 'datakey']) {
      t.equal(
        (await gw.execute({ orgId: ORG, runId, name: 'write_file', arguments: { path, content: 'x' } })).status,
        'error',
        `write_file ${path} is refused`
      )
    }
    t.equal(await readFile(join(other, 'theirs.txt'), 'utf8'), 'OTHER-ORG-FILE')
    t.equal(await readFile(join(dataDir, 'host-only.key'), 'utf8'), 'HOST-SECRET')
    t.notOk(existsSync(join(other, 'planted.txt')))
    t.notOk(existsSync(join(dataDir, 'planted.txt')))
    // the shell sees the same view: no DATA_DIR, no other workspace
    const shell = await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
    t.equal(shell.statusCode, 200)
    const look = await gw.execute({
      orgId: ORG,
      runId,
      name: 'shell',
      arguments: { command: `cat datakey otherabs/theirs.txt ${join(other, 'theirs.txt')} 2>&1; ls up` }
    })
    t.notMatch(look.content, /HOST-SECRET|OTHER-ORG-FILE/)
    // nor can a hard link bring a system file into the workspace (another mount in the sandbox)
    const hard = await gw.execute({
      orgId: ORG,
      runId,
      name: 'shell',
      arguments: { command: 'ln /etc/passwd hard-passwd' }
    })
    t.equal(hard.status, 'error')
    t.notOk(existsSync(join(workspace, 'hard-passwd')))
  }
)

t.test(
  'sandboxed processes drop root: another user, no capabilities, no_new_privs',
  { skip: embeddedPassOnly || skip || (root ? false : 'the service does not run as root here') },
  async (t) => {
    const { app, runId, workspace } = await setup({ t })
    const gw = app.runtime.gateway
    await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
    const shadow = await gw.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'cat /etc/shadow' } })
    t.equal(shadow.status, 'error', 'reading /etc/shadow fails')
    t.match(shadow.content, /No such file/, 'the sandbox has none')
    const who = await gw.execute({
      orgId: ORG,
      runId,
      name: 'shell',
      arguments: {
        command: 'id -u; id -g; id -G; grep -E "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):" /proc/self/status'
      }
    })
    t.equal(who.status, 'ok')
    const lines = who.content.split('\n').slice(1)
    t.same(
      lines.slice(0, 3),
      ['65534', '65534', '65534'],
      'uid, gid and the only group are SANDBOX_UID and SANDBOX_GID'
    )
    for (const cap of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
      t.match(who.content, new RegExp(`${cap}:\\s+0+\\n`), `${cap} is empty`)
    t.match(who.content, /NoNewPrivs:\s+1/)
    // what the tools and the shell write belongs to that user on the host
    await app.inject({ method: 'PUT', url: '/api/tools/policies/write_file', payload: { mode: 'auto' } })
    t.equal(
      (await gw.execute({ orgId: ORG, runId, name: 'write_file', arguments: { path: 'mine.txt', content: 'x' } }))
        .status,
      'ok'
    )
    const info = await stat(join(workspace, 'mine.txt'))
    t.same([info.uid, info.gid], [65534, 65534])
    t.same([(await stat(workspace)).uid], [65534], "the workspace itself is that user's")
  }
)

t.test(
  'the desktop never reads the workspace: a planted .x11vncrc is ignored',
  { skip: embeddedPassOnly || (hasDesktop ? false : 'Xvfb and x11vnc are not installed') },
  async (t) => {
    const { app, threadId, workspace, dataDir } = await setup({ t })
    const planted = join(dataDir, 'x11vnc-read-the-workspace.log')
    const { sandbox, release } = await app.runtime.sandboxes!.acquire({ orgId: ORG, threadId })
    t.teardown(release)
    // x11vnc reads $HOME/.x11vncrc, where options such as -afteraccept run commands as the service user
    await writeFile(join(workspace, '.x11vncrc'), `logfile ${planted}\n`)
    const endpoint = await sandbox.desktop()
    t.match(endpoint, { path: /\/rfb\.sock$/ }, 'a unix socket')
    t.notOk(existsSync(planted), 'the options in the workspace were not applied')
  }
)

t.test(
  'a sandboxed command sees none of the host: its own processes, no host path, no service secret, a bare /etc',
  { skip: embeddedPassOnly || skip },
  async (t) => {
    const { app, runId, dataDir } = await setup({ t })
    const gw = app.runtime.gateway
    await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
    await writeFile(join(dataDir, 'secrets.key'), 'HOST-SECRETS-KEY')
    // the service's own environment (where SECRETS_KEY lives)
    process.env.CAIRN_CONFINEMENT_PROBE = 'SERVICE-ENVIRONMENT'
    t.teardown(() => delete process.env.CAIRN_CONFINEMENT_PROBE)
    const shell = async (command: string) =>
      (await gw.execute({ orgId: ORG, runId, name: 'shell', arguments: { command } })).content
    const processes = await shell(
      'for p in /proc/[0-9]*; do printf "%s: " "$p"; tr "\\0" " " < "$p/cmdline"; echo; done'
    )
    const lines = processes.split('\n').filter((l) => l.startsWith('/proc/'))
    t.ok(lines.length > 0 && lines.length <= 4, `only the command's own processes: ${JSON.stringify(lines)}`)
    t.notMatch(processes, /node|tsx|tap/, "none of the service's processes")
    t.notOk(processes.includes(dataDir), 'no host path (DATA_DIR) in any command line, /proc/1 included')
    t.match(
      processes,
      /\/proc\/1: bwrap --info-fd 3 --args 4 -- /,
      "pid 1 is bubblewrap's, its options read from a descriptor"
    )

    const secrets = await shell(
      `cat ${join(dataDir, 'secrets.key')} /proc/${process.pid}/environ /proc/${process.pid}/cmdline /etc/shadow 2>&1; true`
    )
    t.notMatch(
      secrets,
      /HOST-SECRETS-KEY|SERVICE-ENVIRONMENT|root:/,
      'no host secret: DATA_DIR, the service, /etc/shadow'
    )
    t.match(secrets, /No such file/)

    const etc = (await shell('ls -A /etc')).split('\n')
    for (const name of ['shadow', 'gshadow', 'ssh', 'npmrc', 'pip.conf', 'sudoers', 'machine-id', 'environment'])
      t.notOk(etc.includes(name), `no /etc/${name}`)
    for (const name of ['passwd', 'group', 'ld.so.cache', 'ssl']) t.ok(etc.includes(name), `/etc/${name} is there`)
    t.match(await shell('ls -A /etc/ssl'), /^exit code 0\ncerts\nopenssl\.cnf\n?$/, 'certificates, no private keys')
    t.match(
      await shell('cat /etc/passwd'),
      /\nroot:x:0:0:[^\n]*\n(sandbox:[^\n]*\n)?nobody:x:65534:[^\n]*\n?$/,
      'a stand-in passwd'
    )
  }
)
