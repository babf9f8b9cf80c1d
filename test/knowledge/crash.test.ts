import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { waitFor } from '../helper.js'
import { startServer, TS_LOADER } from '../server-process.js'
import { markdownWithTable } from './fixtures.js'

t.test('a worker killed mid-extraction: its document is claimed again after the lease, then ready', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-knowledge-crash-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = { DATA_DIR: dataDir, KNOWLEDGE_LEASE_MS: '1500', KNOWLEDGE_POLL_MS: '100' }

  // the first process claims the document and never finishes extracting it
  const first = await startServer(env, [...TS_LOADER, 'test/knowledge/hold-server.ts'])
  t.teardown(() => first.kill('SIGKILL'))
  const form = new FormData()
  form.append('file', new Blob([markdownWithTable(50)], { type: 'text/markdown' }), 'inventory.md')
  const res = await fetch(`${first.url}/api/knowledge/documents`, { method: 'POST', body: form })
  t.equal(res.status, 202)
  const { document } = (await res.json()) as { document: { id: string } }
  const get = async (url: string) =>
    (
      (await (await fetch(`${url}/api/knowledge/documents/${document.id}`)).json()) as {
        document: { state: string; attempts: number; chunkCount: number }
      }
    ).document
  const claimed = await waitFor('the first process to claim it', async () => {
    const d = await get(first.url)
    return d.state === 'processing' ? d : null
  })
  t.equal(claimed.attempts, 1)
  first.kill('SIGKILL')
  await first.exit

  // the next process on the same data finds it held by a dead worker, waits out the lease, takes it
  const second = await startServer(env)
  t.teardown(() => second.kill('SIGKILL'))
  const ready = await waitFor(
    'the document to be ready',
    async () => {
      const d = await get(second.url)
      return d.state === 'ready' ? d : null
    },
    60_000
  )
  t.equal(ready.attempts, 2, 'the second claim is its second attempt')
  t.ok(ready.chunkCount > 1)
  const hits = (await (await fetch(`${second.url}/api/knowledge/search?q=host-042`)).json()) as {
    items: Array<{ documentId: string }>
  }
  t.equal(hits.items[0]?.documentId, document.id)
  second.kill('SIGTERM')
  await second.exit
})

t.test('a document whose every attempt dies is failed with why, never left processing', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-knowledge-crash-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = { DATA_DIR: dataDir, KNOWLEDGE_LEASE_MS: '1000', KNOWLEDGE_POLL_MS: '100', KNOWLEDGE_MAX_ATTEMPTS: '1' }
  const first = await startServer(env, [...TS_LOADER, 'test/knowledge/hold-server.ts'])
  t.teardown(() => first.kill('SIGKILL'))
  const form = new FormData()
  form.append('file', new Blob(['# one\n\nshot'], { type: 'text/markdown' }), 'once.md')
  const { document } = (await (
    await fetch(`${first.url}/api/knowledge/documents`, { method: 'POST', body: form })
  ).json()) as { document: { id: string } }
  const stateOn = async (url: string) =>
    (
      (await (await fetch(`${url}/api/knowledge/documents/${document.id}`)).json()) as {
        document: { state: string; lastError: string; attempts: number }
      }
    ).document
  await waitFor('the claim', async () => (await stateOn(first.url)).state === 'processing')
  first.kill('SIGKILL')
  await first.exit
  const second = await startServer(env)
  t.teardown(() => second.kill('SIGKILL'))
  const failed = await waitFor(
    'the document to fail',
    async () => {
      const d = await stateOn(second.url)
      return d.state === 'failed' ? d : null
    },
    30_000
  )
  t.match(failed, { attempts: 1, lastError: /stopped before it finished/ })
  second.kill('SIGTERM')
  await second.exit
})
