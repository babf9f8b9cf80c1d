import { eq } from 'drizzle-orm'
import t from 'tap'
import { artifactVersions } from '../../src/artifacts/tables.js'
import { runEvents } from '../../src/runs/tables.js'
import { buildTestApp, mintKey, signUpWithOrg, waitFor } from '../helper.js'
import { count, createText, expirePins, PNG, sha256, upload } from './helpers.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

const TEXT = 'line one\nline two\nline three\n'

async function makeArtifact(app: App, body: Record<string, unknown> = {}) {
  const res = await createText(app, { name: 'notes.txt', content: TEXT, ...body })
  if (res.statusCode !== 201) throw new Error(`create failed: ${res.statusCode} ${res.body}`)
  return res.json().artifact as { id: string; version: number; sha256: string; size: number; name: string }
}

const content = (app: App, id: string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'GET', url: `/api/artifacts/${id}/content`, headers })
const put = (app: App, id: string, body: string, headers: Record<string, string>) =>
  app.inject({
    method: 'PUT',
    url: `/api/artifacts/${id}/content`,
    payload: body,
    headers: { 'content-type': 'text/plain', ...headers }
  })

t.test('made through the API from text or an upload: version 1, source api', async (t) => {
  const app = await buildTestApp(t)
  const res = await createText(app, { name: 'notes.txt', content: TEXT })
  t.equal(res.statusCode, 201)
  const a = res.json().artifact
  t.same(Object.keys(a).sort(), [
    'contentType',
    'createdAt',
    'createdBy',
    'id',
    'name',
    'rootRunId',
    'runId',
    'sha256',
    'size',
    'updatedAt',
    'version'
  ])
  t.match(a, {
    name: 'notes.txt',
    contentType: 'text/plain',
    size: Buffer.byteLength(TEXT),
    sha256: sha256(TEXT),
    version: 1,
    runId: null,
    rootRunId: null,
    createdBy: null
  })

  const up = (await upload(app, { filename: 'pic.png', type: 'image/png', bytes: PNG })).json().upload
  const fromUpload = (await createText(app, { name: 'picture.png', uploadId: up.id })).json().artifact
  t.match(fromUpload, { contentType: 'image/png', size: PNG.length, sha256: up.sha256 })
  t.equal(await count(app, 'blobs'), 2, "the upload's blob is shared, not copied")

  const versions = (await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/versions` })).json()
  t.match(versions, {
    items: [{ version: 1, source: 'api', sha256: sha256(TEXT), runId: null, createdBy: null }],
    nextCursor: null
  })

  const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'hi' } })).json().run
  const linked = (
    await createText(app, { name: 'r.md', content: '# r', contentType: 'text/markdown', runId: run.id })
  ).json().artifact
  t.match(linked, { runId: run.id, rootRunId: run.rootRunId, contentType: 'text/markdown' })
  const byRun = (await app.inject({ method: 'GET', url: `/api/artifacts?runId=${run.id}` })).json()
  t.same(
    byRun.items.map((i: { id: string }) => i.id),
    [linked.id]
  )
  const byThread = (await app.inject({ method: 'GET', url: `/api/artifacts?rootRunId=${run.rootRunId}` })).json()
  t.same(
    byThread.items.map((i: { id: string }) => i.id),
    [linked.id]
  )
})

t.test('creation refusals change nothing', async (t) => {
  const app = await buildTestApp(t, { env: { UPLOAD_MAX_BYTES: '100' } })
  const cases: Array<[Record<string, unknown>, number, string]> = [
    [{ name: 'a.png', content: 'x', contentType: 'image/png' }, 415, 'unsupported_media_type'],
    [{ name: 'a.txt', content: 'x', runId: 'nope' }, 404, 'not_found'],
    [{ name: 'a.txt', uploadId: 'nope' }, 404, 'not_found'],
    [{ name: 'a.txt', content: 'x'.repeat(101) }, 413, 'payload_too_large'],
    [{ name: 'bad\r\nname', content: 'x' }, 400, 'validation_failed'],
    [{ name: '', content: 'x' }, 400, 'validation_failed'],
    [{ name: 'a.txt', content: 'x', uploadId: 'both' }, 400, 'validation_failed'],
    [{ name: 'a.txt', content: 'x', version: 3 }, 400, 'validation_failed']
  ]
  for (const [body, status, error] of cases) {
    const res = await createText(app, body)
    t.equal(res.statusCode, status, JSON.stringify(body))
    t.equal(res.json().error, error)
  }
  t.equal(await count(app, 'artifacts'), 0)
  t.equal(await count(app, 'blobs'), 0)
})

t.test(
  'a run has one artifact per name: the same name again for that run is 409 conflict, and changes nothing',
  async (t) => {
    const app = await buildTestApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
    const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'hi' } })).json().run
    const first = await createText(app, { name: 'report.md', content: '# first', runId: run.id })
    t.equal(first.statusCode, 201)
    const up = (await upload(app, { filename: 'pic.png', type: 'image/png', bytes: PNG })).json().upload
    const blobsBefore = await count(app, 'blobs')
    for (const body of [{ content: '# second' }, { content: '# first' }, { uploadId: up.id }]) {
      const again = await createText(app, { name: 'report.md', runId: run.id, ...body })
      t.equal(again.statusCode, 409, JSON.stringify(body))
      t.same(Object.keys(again.json()).sort(), ['error', 'message'])
      t.equal(again.json().error, 'conflict')
      t.match(again.json().message, /already has an artifact named "report\.md"/)
    }
    t.equal(await count(app, 'artifacts'), 1)
    t.equal(await count(app, 'artifact_versions'), 1)
    t.equal(await count(app, 'blobs'), blobsBefore, 'no bytes were stored for a refused name')
    const current = await content(app, first.json().artifact.id)
    t.equal(current.body, '# first')

    // the name is the run's: without a run, or for another run, it is free
    t.equal((await createText(app, { name: 'report.md', content: '# loose' })).statusCode, 201)
    const other = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'other' } })).json().run
    t.equal((await createText(app, { name: 'report.md', content: '# other', runId: other.id })).statusCode, 201)

    // requests racing for one name: the unique index answers for the losers, as a 409 too
    const racing = await Promise.all(
      Array.from({ length: 6 }, (_, i) => createText(app, { name: 'race.md', content: `# racer ${i}`, runId: run.id }))
    )
    t.same(racing.map((r) => r.statusCode).sort(), [201, 409, 409, 409, 409, 409])
    t.ok(racing.every((r) => r.statusCode === 201 || r.json().error === 'conflict'))
    const named = (await app.inject({ method: 'GET', url: `/api/artifacts?runId=${run.id}` })).json().items as Array<{
      name: string
    }>
    t.same(named.map((a) => a.name).sort(), ['race.md', 'report.md'])
    t.equal(await count(app, 'artifact_versions'), 4)
  }
)

t.test('content: ETag, 304, ranges, If-Range, safe headers', async (t) => {
  const app = await buildTestApp(t)
  const a = await makeArtifact(app)
  const whole = await content(app, a.id)
  t.equal(whole.statusCode, 200)
  t.equal(whole.body, TEXT)
  t.equal(whole.headers.etag, '"v1"')
  t.equal(whole.headers['content-type'], 'text/plain')
  t.equal(whole.headers['content-length'], String(TEXT.length))
  t.equal(whole.headers['accept-ranges'], 'bytes')
  t.equal(whole.headers['x-content-type-options'], 'nosniff')
  t.equal(whole.headers['content-security-policy'], 'sandbox')
  t.equal(whole.headers['content-disposition'], 'inline; filename="notes.txt"')

  t.equal((await content(app, a.id, { 'if-none-match': '"v1"' })).statusCode, 304)
  t.equal((await content(app, a.id, { 'if-none-match': 'W/"v1"' })).statusCode, 304, 'weak comparison')
  t.equal((await content(app, a.id, { 'if-none-match': '"v0", "v1"' })).statusCode, 304)
  t.equal((await content(app, a.id, { 'if-none-match': '"v2"' })).statusCode, 200)

  const first = await content(app, a.id, { range: 'bytes=0-0' })
  t.equal(first.statusCode, 206)
  t.equal(first.body, 'l')
  t.equal(first.headers['content-range'], `bytes 0-0/${TEXT.length}`)
  t.equal(first.headers['content-length'], '1')
  const last = await content(app, a.id, { range: `bytes=${TEXT.length - 1}-` })
  t.equal(last.statusCode, 206)
  t.equal(last.body, '\n')
  const suffix = await content(app, a.id, { range: 'bytes=-10' })
  t.equal(suffix.statusCode, 206)
  t.equal(suffix.body, TEXT.slice(-10))
  t.equal(suffix.headers['content-range'], `bytes ${TEXT.length - 10}-${TEXT.length - 1}/${TEXT.length}`)
  const beyondEnd = await content(app, a.id, { range: 'bytes=5-100000' })
  t.equal(beyondEnd.statusCode, 206, 'an end past the content is cut to it')
  t.equal(beyondEnd.body, TEXT.slice(5))

  const outside = await content(app, a.id, { range: 'bytes=100000-100010' })
  t.equal(outside.statusCode, 416)
  t.equal(outside.json().error, 'range_not_satisfiable')
  t.equal(outside.headers['content-range'], `bytes */${TEXT.length}`)
  const several = await content(app, a.id, { range: 'bytes=0-1,5-6' })
  t.equal(several.statusCode, 200, 'several ranges: the whole content')
  t.equal(several.body, TEXT)
  const malformed = await content(app, a.id, { range: 'bytes=abc' })
  t.equal(malformed.statusCode, 200)
  t.equal(
    (await content(app, a.id, { range: 'bytes=0-3', 'if-range': '"v0"' })).statusCode,
    200,
    'stale If-Range: whole'
  )
  const fresh = await content(app, a.id, { range: 'bytes=0-3', 'if-range': '"v1"' })
  t.equal(fresh.statusCode, 206)
  t.equal(fresh.body, 'line')

  const head = await app.inject({ method: 'HEAD', url: `/api/artifacts/${a.id}/content` })
  t.equal(head.statusCode, 200)
  t.equal(head.body, '')
  t.equal(head.headers['content-length'], String(TEXT.length))
})

t.test('Content-Disposition: inline only for the safe types; names never inject a header', async (t) => {
  const app = await buildTestApp(t)
  const disposition = async (name: string, body: Record<string, unknown>) => {
    const a = (await createText(app, { name, ...body })).json().artifact
    return (await content(app, a.id)).headers['content-disposition']
  }
  t.equal(
    await disposition('page.html', { content: '<script>alert(1)</script>', contentType: 'text/html' }),
    'attachment; filename="page.html"'
  )
  t.equal(
    await disposition('x.svg', { content: '<svg xmlns="http://www.w3.org/2000/svg"/>', contentType: 'image/svg+xml' }),
    'attachment; filename="x.svg"'
  )
  t.equal(await disposition('d.json', { content: '{}', contentType: 'application/json' }), 'inline; filename="d.json"')
  t.equal(await disposition('d.md', { content: '# d', contentType: 'text/markdown' }), 'attachment; filename="d.md"')
  t.equal(
    await disposition('résumé.txt', { content: 'cv' }),
    'inline; filename="r?sum?.txt"; filename*=UTF-8\'\'r%C3%A9sum%C3%A9.txt'
  )
  t.equal(await disposition('say "hi"; x=1.txt', { content: 'q' }), 'inline; filename="say \\"hi\\"; x=1.txt"')
  const up = (await upload(app, { filename: 'pic.png', type: 'image/png', bytes: PNG })).json().upload
  t.equal(await disposition('pic.png', { uploadId: up.id }), 'inline; filename="pic.png"')
})

t.test(
  'PUT content: If-Match required, stale 412, else a new version (source edit) with its Content-Type',
  async (t) => {
    const app = await buildTestApp(t)
    const owner = await signUpWithOrg(app)
    const cookie = { cookie: owner.cookie }
    const a = (await createText(app, { name: 'n.txt', content: TEXT }, cookie)).json().artifact
    const missing = await put(app, a.id, 'new', cookie)
    t.equal(missing.statusCode, 428)
    t.equal(missing.json().error, 'precondition_required')
    const stale = await put(app, a.id, 'new', { ...cookie, 'if-match': '"v7"' })
    t.equal(stale.statusCode, 412)
    t.equal(stale.json().error, 'precondition_failed')
    t.equal(
      (await put(app, a.id, 'new', { ...cookie, 'if-match': 'W/"v1"' })).statusCode,
      412,
      'weak tags never match If-Match'
    )

    const ok = await put(app, a.id, '# new\n', {
      ...cookie,
      'if-match': '"v1"',
      'content-type': 'text/markdown; charset=utf-8'
    })
    t.equal(ok.statusCode, 200)
    t.equal(ok.headers.etag, '"v2"')
    t.match(ok.json().artifact, {
      id: a.id,
      version: 2,
      contentType: 'text/markdown; charset=utf-8',
      size: 6,
      sha256: sha256('# new\n')
    })
    const now = await content(app, a.id, cookie)
    t.equal(now.body, '# new\n')
    t.equal(now.headers['content-type'], 'text/markdown; charset=utf-8')
    t.equal(now.headers.etag, '"v2"')

    const versions = (
      await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/versions`, headers: cookie })
    ).json()
    t.match(versions.items, [
      { version: 2, source: 'edit', createdBy: owner.user.id },
      { version: 1, source: 'api', createdBy: owner.user.id }
    ])
    const v1 = await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/versions/1/content`, headers: cookie })
    t.equal(v1.body, TEXT, 'every version kept byte for byte')
    t.equal(v1.headers.etag, '"v1"')
    t.equal(
      (await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/versions/9/content`, headers: cookie }))
        .statusCode,
      404
    )

    const any = await put(app, a.id, 'star', { ...cookie, 'if-match': '*' })
    t.equal(any.json().artifact.version, 3, 'If-Match: * takes whatever is current')
  }
)

t.test('20 concurrent PUTs with one If-Match: exactly one new version', async (t) => {
  const app = await buildTestApp(t)
  const a = await makeArtifact(app)
  const answers = await Promise.all(
    Array.from({ length: 20 }, (_, i) => put(app, a.id, `writer ${i}`, { 'if-match': '"v1"' }))
  )
  const codes = answers.map((r) => r.statusCode).sort()
  t.same(codes, [200, ...Array(19).fill(412)])
  const winner = answers.find((r) => r.statusCode === 200)!.json().artifact
  t.equal(winner.version, 2)
  t.equal((await content(app, a.id)).body, `writer ${answers.findIndex((r) => r.statusCode === 200)}`)
  t.equal((await app.db.select().from(artifactVersions).where(eq(artifactVersions.artifactId, a.id))).length, 2)
  // the losers' bytes are not referenced: the sweep takes them once their pins pass
  await expirePins(app)
  await app.artifacts.sweeper.sweep()
  t.equal(await count(app, 'blobs'), 2, 'version 1 and the winner')
})

t.test('versions page newest first; a cursor that is not a version of the list is 400 naming it', async (t) => {
  const app = await buildTestApp(t)
  const a = await makeArtifact(app)
  for (let v = 1; v < 5; v++)
    t.equal((await put(app, a.id, `version ${v + 1}`, { 'if-match': `"v${v}"` })).statusCode, 200)
  const seen: number[] = []
  let cursor: string | null = null
  do {
    const url: string = `/api/artifacts/${a.id}/versions?limit=2${cursor ? `&cursor=${cursor}` : ''}`
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 200)
    seen.push(...res.json().items.map((v: { version: number }) => v.version))
    cursor = res.json().nextCursor
  } while (cursor && seen.length < 10)
  t.same(seen, [5, 4, 3, 2, 1])
  // past the integer column, not a number, zero, an id (another list's cursor)
  for (const key of ['2147483648', '99999999999', 'three', '0', a.id]) {
    const res = await app.inject({
      method: 'GET',
      url: `/api/artifacts/${a.id}/versions?cursor=${Buffer.from(key).toString('base64url')}`
    })
    t.equal(res.statusCode, 400, key)
    t.match(res.json(), { error: 'validation_failed', details: [{ path: '/querystring/cursor' }] })
  }
})

t.test('PUT over the limit: 413, no version, no blob', async (t) => {
  const app = await buildTestApp(t, { env: { UPLOAD_MAX_BYTES: '50' } })
  const a = (await createText(app, { name: 'n.txt', content: 'small' })).json().artifact
  const big = await put(app, a.id, 'x'.repeat(51), { 'if-match': '"v1"' })
  t.equal(big.statusCode, 413)
  t.equal(big.json().error, 'payload_too_large')
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}` })).json().artifact.version, 1)
  t.equal(await count(app, 'blobs'), 1)
})

t.test('delete: every version goes; blobs another row uses stay', async (t) => {
  const app = await buildTestApp(t)
  const up = (await upload(app, { filename: 'same.txt', type: 'text/plain', bytes: TEXT })).json().upload
  const a = await makeArtifact(app)
  t.equal(a.sha256, up.sha256)
  await put(app, a.id, 'second', { 'if-match': '"v1"' })
  t.equal((await app.inject({ method: 'DELETE', url: `/api/artifacts/${a.id}` })).statusCode, 204)
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}` })).statusCode, 404)
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/content` })).statusCode, 404)
  t.equal(await count(app, 'artifact_versions'), 0)
  await expirePins(app)
  t.equal(await app.artifacts.sweeper.sweep(), 1, "version 2's bytes go")
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/uploads/${up.id}/content` })).body,
    TEXT,
    'the upload still has its bytes'
  )
})

t.test('proposals: diff, accept makes a version, a stale or decided proposal is 409, rejects', async (t) => {
  const app = await buildTestApp(t)
  const a = await makeArtifact(app)
  const propose = (body: Record<string, unknown>) =>
    app.inject({ method: 'POST', url: `/api/artifacts/${a.id}/proposals`, payload: body })
  const res = await propose({ content: 'line one\nline 2\nline three\n', baseVersion: 1, summary: 'fix a number' })
  t.equal(res.statusCode, 201)
  const p = res.json().proposal
  t.same(Object.keys(p).sort(), [
    'artifactId',
    'baseVersion',
    'createdAt',
    'createdBy',
    'decidedAt',
    'decidedBy',
    'id',
    'runId',
    'state',
    'summary'
  ])
  t.match(p, {
    artifactId: a.id,
    baseVersion: 1,
    summary: 'fix a number',
    state: 'open',
    runId: null,
    decidedAt: null,
    decidedBy: null
  })

  const diff = await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/proposals/${p.id}/diff` })
  t.equal(diff.statusCode, 200)
  t.match(diff.headers['content-type'], /^text\/plain/)
  const policy = String(diff.headers['content-security-policy']).split(/;\s*/)
  t.ok(policy.includes('sandbox'), 'a browser opening the diff runs nothing of it')
  t.ok(policy.includes("default-src 'none'") && policy.includes("frame-ancestors 'none'"), "the API's policy stays")
  t.equal(diff.headers['x-content-type-options'], 'nosniff')
  t.match(diff.body, /-line two\n\+line 2\n/)
  t.match(diff.body, /^={0,}\n?--- notes\.txt@v1/m)

  const other = (await propose({ content: 'another take\n', baseVersion: 1 })).json().proposal
  const third = (await propose({ content: 'third\n', baseVersion: 1 })).json().proposal
  t.equal((await propose({ content: 'x', baseVersion: 5 })).statusCode, 409, 'no such base version')

  const accepted = await app.inject({ method: 'POST', url: `/api/artifacts/${a.id}/proposals/${p.id}/accept` })
  t.equal(accepted.statusCode, 200)
  t.match(accepted.json(), { artifact: { id: a.id, version: 2 }, proposal: { id: p.id, state: 'accepted' } })
  t.ok(accepted.json().proposal.decidedAt)
  t.equal((await content(app, a.id)).body, 'line one\nline 2\nline three\n')
  const versions = (await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/versions` })).json().items
  t.equal(versions[0].source, 'proposal')

  const again = await app.inject({ method: 'POST', url: `/api/artifacts/${a.id}/proposals/${p.id}/accept` })
  t.equal(again.statusCode, 409, 'not open any more')
  const staleAccept = await app.inject({ method: 'POST', url: `/api/artifacts/${a.id}/proposals/${other.id}/accept` })
  t.equal(staleAccept.statusCode, 409, 'the artifact moved past its base')
  t.equal(staleAccept.json().error, 'conflict')
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}` })).json().artifact.version,
    2,
    'nothing changed'
  )

  const rejected = await app.inject({ method: 'POST', url: `/api/artifacts/${a.id}/proposals/${third.id}/reject` })
  t.equal(rejected.statusCode, 200)
  t.equal(rejected.json().proposal.state, 'rejected')
  const open = (await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/proposals?state=open` })).json().items
  t.same(
    open.map((x: { id: string }) => x.id),
    [other.id]
  )
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/proposals/nope/diff` })).statusCode, 404)
})

t.test('two accepts race: one wins', async (t) => {
  const app = await buildTestApp(t)
  const a = await makeArtifact(app)
  const p = (
    await app.inject({
      method: 'POST',
      url: `/api/artifacts/${a.id}/proposals`,
      payload: { content: 'raced', baseVersion: 1 }
    })
  ).json().proposal
  const q = (
    await app.inject({
      method: 'POST',
      url: `/api/artifacts/${a.id}/proposals`,
      payload: { content: 'raced too', baseVersion: 1 }
    })
  ).json().proposal
  const answers = await Promise.all(
    [p, p, q, q].map((x) => app.inject({ method: 'POST', url: `/api/artifacts/${a.id}/proposals/${x.id}/accept` }))
  )
  t.same(answers.map((r) => r.statusCode).sort(), [200, 409, 409, 409])
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}` })).json().artifact.version, 2)
})

t.test('a run saves its answer for each `artifact: <name>` line and streams artifact.created', async (t) => {
  const app = await buildTestApp(t, { env: { ECHO_WORD_DELAY_MS: '0' } })
  const prompt = 'Write the summary\nartifact: summary.md\nartifact: copy.md'
  const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt } })).json().run
  await waitFor(
    'the run',
    async () => (await app.inject({ method: 'GET', url: `/api/runs/${run.id}` })).json().run.status === 'succeeded'
  )
  const listed = (await app.inject({ method: 'GET', url: `/api/artifacts?runId=${run.id}` })).json().items
  t.same(listed.map((x: { name: string }) => x.name).sort(), ['copy.md', 'summary.md'])
  const summary = listed.find((x: { name: string }) => x.name === 'summary.md')
  t.match(summary, {
    runId: run.id,
    rootRunId: run.rootRunId,
    contentType: 'text/markdown',
    version: 1,
    createdBy: null
  })
  const answer = prompt.split(/\s+/).join(' ')
  t.equal((await content(app, summary.id)).body, answer, 'the whole answer')
  const versions = (await app.inject({ method: 'GET', url: `/api/artifacts/${summary.id}/versions` })).json().items
  t.equal(versions[0].source, 'run')
  t.equal(versions[0].runId, run.id)
  const events = (await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(runEvents.id)).map(
    (e) => ({ type: e.type, data: e.data })
  )
  const created = events.filter((e) => e.type === 'artifact.created')
  t.same(
    created.map((e) => e.data).sort((x, y) => String(x.name).localeCompare(String(y.name))),
    [
      { artifactId: listed.find((x: { name: string }) => x.name === 'copy.md').id, name: 'copy.md', version: 1 },
      { artifactId: summary.id, name: 'summary.md', version: 1 }
    ]
  )
  const order = events.map((e) => e.type)
  t.ok(
    order.indexOf('artifact.created') > order.indexOf('message.completed') &&
      order.indexOf('artifact.created') < order.indexOf('run.succeeded')
  )
})

t.test('keys read artifacts and their current content, nothing else of the group', async (t) => {
  const app = await buildTestApp(t)
  const owner = await signUpWithOrg(app)
  const key = await mintKey(app, owner.cookie)
  const a = (await createText(app, { name: 'k.txt', content: 'for keys' }, { cookie: owner.cookie })).json().artifact
  const as = { authorization: key.authorization }
  t.equal((await app.inject({ method: 'GET', url: '/api/artifacts', headers: as })).json().items.length, 1)
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}`, headers: as })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/content`, headers: as })).body, 'for keys')
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/versions`, headers: as })).statusCode, 401)
  t.equal((await createText(app, { name: 'no.txt', content: 'x' }, as)).statusCode, 401)
  t.equal((await put(app, a.id, 'x', { ...as, 'if-match': '"v1"' })).statusCode, 401)
})
