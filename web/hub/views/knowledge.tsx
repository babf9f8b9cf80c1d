import { useEffect, useRef, useState } from 'preact/hooks'
import type { Doc, DocPage, DocReply, Knowledge, KnowledgePage, KnowledgeReply, KnowledgeSearch } from '../admin-api.js'
import { api, query } from '../api.js'
import { navigate } from '../router.js'
import { Empty, ErrorBox, Loading, Time, useAction, useLoad } from '../ui.js'
import { Confirm, Modal, PAGE, Pager, Refused, Snippet, tagsOf, valueOf } from './admin-kit.js'

/** Document states still moving: the list asks again until none is. */
const MOVING = new Set<Doc['state']>(['queued', 'processing'])
const POLL_MS = 1000

const STATE_LABEL: Record<Doc['state'], string> = {
  queued: 'Queued',
  processing: 'Processing',
  ready: 'Ready',
  failed: 'Failed'
}

/**
 * Knowledge: search over records and documents, the records (add, edit, delete), and the
 * documents whose text becomes searchable (upload, ingestion state, retry, delete). The query
 * and each list's page are in the address.
 */
export function KnowledgeView({ params }: { params: URLSearchParams }) {
  const q = params.get('q') ?? ''
  const at = (next: Record<string, string | undefined>) => {
    const all: Record<string, string | undefined> = {
      q: q || undefined,
      cursor: params.get('cursor') ?? undefined,
      docs: params.get('docs') ?? undefined,
      ...next
    }
    navigate(`/knowledge${query(all)}`, { replace: false })
  }
  const [editing, setEditing] = useState<string | null>(null)
  const [changed, setChanged] = useState(0)
  const bump = () => setChanged((n) => n + 1)
  return (
    <section aria-labelledby="knowledge-title">
      <h1 id="knowledge-title">Knowledge</h1>
      <p class="lede">
        What runs can look up: records written here or approved from drafts, and documents whose text is split into
        searchable chunks.
      </p>
      <KnowledgeSearchBox q={q} onSearch={(text) => at({ q: text.trim() || undefined })} onEdit={setEditing} />
      <div class="split">
        <AddRecord added={bump} />
        <UploadDocument uploaded={bump} />
      </div>
      <Records
        cursor={params.get('cursor') ?? undefined}
        changed={changed}
        onPage={(cursor) => at({ cursor })}
        onEdit={setEditing}
        onChanged={bump}
      />
      <Documents
        cursor={params.get('docs') ?? undefined}
        changed={changed}
        onPage={(docs) => at({ docs })}
        onChanged={bump}
      />
      <EditRecord
        id={editing}
        close={() => setEditing(null)}
        saved={() => {
          setEditing(null)
          bump()
        }}
      />
    </section>
  )
}

function KnowledgeSearchBox({
  q,
  onSearch,
  onEdit
}: {
  q: string
  onSearch: (text: string) => void
  onEdit: (id: string) => void
}) {
  const [text, setText] = useState(q)
  useEffect(() => setText(q), [q])
  const [state, reload] = useLoad(`knowledge search ${q}`, async () =>
    q.trim() === '' ? null : api<KnowledgeSearch>('GET', `/knowledge/search${query({ q, limit: PAGE })}`)
  )
  return (
    <div class="knowledge-search">
      <form
        role="search"
        class="search"
        aria-label="Search knowledge"
        onSubmit={(e) => {
          e.preventDefault()
          onSearch(text)
        }}
      >
        <label for="knowledge-q">Search records and documents</label>
        <div class="row">
          <input
            id="knowledge-q"
            type="search"
            value={text}
            maxLength={500}
            autoComplete="off"
            placeholder='words, "a phrase", -excluded'
            onInput={(e) => setText(valueOf(e))}
          />
          <button type="submit">Search</button>
        </div>
      </form>
      {state.status === 'loading' ? <Loading what="results" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' && state.data !== null ? (
        state.data.items.length === 0 ? (
          <Empty>
            <p>Nothing in the records or documents matches “{q}”.</p>
          </Empty>
        ) : (
          <>
            <p class="summary" role="status">
              {state.data.items.length} {state.data.items.length === 1 ? 'match' : 'matches'} for “{q}”
              {state.data.truncated ? ' (more matched: refine the query)' : ''}.
            </p>
            <ol class="cards" aria-label="Knowledge search results">
              {state.data.items.map((hit) => (
                <li key={`${hit.kind} ${hit.id}`} class="card hit">
                  <h3>{hit.title}</h3>
                  <Snippet html={hit.snippet} />
                  <p class="meta">
                    <span>{hit.kind === 'record' ? 'record' : 'document chunk'}</span>
                    <span> · score {hit.score.toFixed(2)}</span>
                    {hit.kind === 'record' && hit.recordId ? (
                      <>
                        <span> · </span>
                        <button
                          type="button"
                          class="link"
                          aria-label={`Edit record ${hit.title}`}
                          onClick={() => onEdit(hit.recordId!)}
                        >
                          Edit record
                        </button>
                      </>
                    ) : null}
                  </p>
                </li>
              ))}
            </ol>
          </>
        )
      ) : null}
    </div>
  )
}

function AddRecord({ added }: { added: () => void }) {
  const [title, setTitle] = useState('')
  const [body, setBody] = useState('')
  const [tags, setTags] = useState('')
  const [done, setDone] = useState<string | null>(null)
  const add = useAction(async () => {
    const { record } = await api<KnowledgeReply>('POST', '/knowledge', {
      title: title.trim(),
      body,
      tags: tagsOf(tags)
    })
    setTitle('')
    setBody('')
    setTags('')
    setDone(record.title)
    added()
  })
  return (
    <form
      class="card stack"
      aria-labelledby="add-record-title"
      onSubmit={(e) => {
        e.preventDefault()
        setDone(null)
        if (title.trim() !== '') add.run()
      }}
    >
      <h2 id="add-record-title">Add a record</h2>
      <label for="record-title">Title</label>
      <input id="record-title" required maxLength={300} value={title} onInput={(e) => setTitle(valueOf(e))} />
      <label for="record-body">Text (Markdown)</label>
      <textarea id="record-body" rows={5} value={body} onInput={(e) => setBody(valueOf(e))} />
      <label for="record-tags">Tags, separated by commas</label>
      <input id="record-tags" value={tags} onInput={(e) => setTags(valueOf(e))} />
      <button type="submit" disabled={add.pending || title.trim() === ''}>
        {add.pending ? 'Adding…' : 'Add record'}
      </button>
      {done !== null ? <p role="status">Added “{done}”.</p> : null}
      {add.error ? <Refused error={add.error} /> : null}
    </form>
  )
}

function UploadDocument({ uploaded }: { uploaded: () => void }) {
  const input = useRef<HTMLInputElement>(null)
  const [chosen, setChosen] = useState<string | null>(null)
  const [done, setDone] = useState<string | null>(null)
  const upload = useAction(async () => {
    const file = input.current?.files?.[0]
    if (!file) return
    const form = new FormData()
    form.append('file', file, file.name)
    const { document } = await api<DocReply>('POST', '/knowledge/documents', form)
    if (input.current) input.current.value = ''
    setChosen(null)
    setDone(document.name)
    uploaded()
  })
  return (
    <form
      class="card stack"
      aria-labelledby="upload-title"
      onSubmit={(e) => {
        e.preventDefault()
        setDone(null)
        upload.run()
      }}
    >
      <h2 id="upload-title">Upload a document</h2>
      <label for="document-file">A PDF, Word (DOCX), HTML, Markdown or text file</label>
      <input
        id="document-file"
        ref={input}
        type="file"
        accept=".pdf,.docx,.html,.htm,.md,.markdown,.txt,application/pdf,text/html,text/markdown,text/plain,application/vnd.openxmlformats-officedocument.wordprocessingml.document"
        onChange={() => setChosen(input.current?.files?.[0]?.name ?? null)}
      />
      <button type="submit" disabled={upload.pending || chosen === null}>
        {upload.pending ? 'Uploading…' : 'Upload'}
      </button>
      {done !== null ? (
        <p role="status">Uploaded “{done}”: its text becomes searchable once it is ready (below).</p>
      ) : null}
      {upload.error ? <Refused error={upload.error} /> : null}
    </form>
  )
}

function Tags({ tags }: { tags: string[] }) {
  if (tags.length === 0) return null
  return (
    <ul class="tags" aria-label="Tags">
      {tags.map((t) => (
        <li key={t}>{t}</li>
      ))}
    </ul>
  )
}

function Records({
  cursor,
  changed,
  onPage,
  onEdit,
  onChanged
}: {
  cursor: string | undefined
  changed: number
  onPage: (cursor: string | undefined) => void
  onEdit: (id: string) => void
  onChanged: () => void
}) {
  const [state, reload] = useLoad(
    `records ${cursor ?? ''} ${changed}`,
    () => api<KnowledgePage>('GET', `/knowledge${query({ limit: PAGE, cursor })}`),
    { keep: true }
  )
  const [deleting, setDeleting] = useState<Knowledge | null>(null)
  const remove = useAction(async () => {
    await api('DELETE', `/knowledge/${encodeURIComponent(deleting!.id)}`)
    setDeleting(null)
    onChanged()
  })
  return (
    <section aria-labelledby="records-title">
      <h2 id="records-title">Records</h2>
      {state.status === 'loading' ? <Loading what="records" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        state.data.items.length === 0 ? (
          <Empty>
            <p>No records yet: add one above.</p>
          </Empty>
        ) : (
          <>
            <ul class="cards" aria-label="Records, newest first">
              {state.data.items.map((r) => (
                <li key={r.id} class="card record">
                  <h3>{r.title}</h3>
                  <Tags tags={r.tags} />
                  <p class="meta">
                    version {r.version} · updated <Time iso={r.updatedAt} /> · {r.source.kind}
                  </p>
                  <div class="row actions">
                    <button type="button" class="secondary" aria-label={`Edit ${r.title}`} onClick={() => onEdit(r.id)}>
                      Edit
                    </button>
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Delete… ${r.title}`}
                      onClick={() => setDeleting(r)}
                    >
                      Delete…
                    </button>
                  </div>
                </li>
              ))}
            </ul>
            <Pager label="Pages of records" cursor={cursor} next={state.data.nextCursor} onChange={onPage} />
          </>
        )
      ) : null}
      <Confirm
        open={deleting !== null}
        id="delete-record-title"
        title="Delete this record?"
        action="Delete record"
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setDeleting(null)}
      >
        <p>Runs stop finding it at once. Its history is kept.</p>
        {deleting ? <blockquote class="content">{deleting.title}</blockquote> : null}
      </Confirm>
    </section>
  )
}

/** A record's edit form in a dialog: the version it was loaded at goes with the change (a stale one is refused). */
function EditRecord({ id, close, saved }: { id: string | null; close: () => void; saved: () => void }) {
  return (
    <Modal open={id !== null} onClose={close} labelledBy="edit-record-title">
      {id !== null ? <EditRecordForm key={id} id={id} close={close} saved={saved} /> : null}
    </Modal>
  )
}

function EditRecordForm({ id, close, saved }: { id: string; close: () => void; saved: () => void }) {
  const [state, reload] = useLoad(`record ${id}`, () =>
    api<KnowledgeReply>('GET', `/knowledge/${encodeURIComponent(id)}`)
  )
  const [draft, setDraft] = useState<{ title: string; body: string; tags: string } | null>(null)
  const record = state.status === 'ok' ? state.data.record : null
  const form = draft ?? (record ? { title: record.title, body: record.body, tags: record.tags.join(', ') } : null)
  const save = useAction(async () => {
    await api('PATCH', `/knowledge/${encodeURIComponent(id)}`, {
      title: form!.title.trim(),
      body: form!.body,
      tags: tagsOf(form!.tags),
      version: record!.version
    })
    saved()
  })
  return (
    <>
      <h2 id="edit-record-title">Edit a record</h2>
      {state.status === 'loading' ? <Loading what="the record" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {form && record ? (
        <form
          class="stack"
          onSubmit={(e) => {
            e.preventDefault()
            if (form.title.trim() !== '') save.run()
          }}
        >
          <label for="edit-record-name">Title</label>
          <input
            id="edit-record-name"
            required
            maxLength={300}
            value={form.title}
            onInput={(e) => setDraft({ ...form, title: valueOf(e) })}
          />
          <label for="edit-record-body">Text (Markdown)</label>
          <textarea
            id="edit-record-body"
            rows={10}
            value={form.body}
            onInput={(e) => setDraft({ ...form, body: valueOf(e) })}
          />
          <label for="edit-record-tags">Tags, separated by commas</label>
          <input id="edit-record-tags" value={form.tags} onInput={(e) => setDraft({ ...form, tags: valueOf(e) })} />
          <p class="muted">Version {record.version}: saving makes the next one.</p>
          {save.error ? <Refused error={save.error} /> : null}
          <div class="row">
            <button type="submit" disabled={save.pending || form.title.trim() === ''}>
              {save.pending ? 'Saving…' : 'Save record'}
            </button>
            <button type="button" class="secondary" onClick={close}>
              Cancel
            </button>
          </div>
        </form>
      ) : null}
    </>
  )
}

function Documents({
  cursor,
  changed,
  onPage,
  onChanged
}: {
  cursor: string | undefined
  changed: number
  onPage: (cursor: string | undefined) => void
  onChanged: () => void
}) {
  const [state, reload] = useLoad(
    `documents ${cursor ?? ''} ${changed}`,
    () => api<DocPage>('GET', `/knowledge/documents${query({ limit: PAGE, cursor })}`),
    { keep: true }
  )
  // a document still queued or processing: ask again shortly, until each has ended
  const moving = state.status === 'ok' && state.data.items.some((d) => MOVING.has(d.state))
  useEffect(() => {
    if (!moving) return
    const timer = setTimeout(reload, POLL_MS)
    return () => clearTimeout(timer)
  }, [moving, state])
  const [deleting, setDeleting] = useState<Doc | null>(null)
  const remove = useAction(async () => {
    await api('DELETE', `/knowledge/documents/${encodeURIComponent(deleting!.id)}`)
    setDeleting(null)
    onChanged()
  })
  const retry = useAction(async (doc: Doc) => {
    await api('POST', `/knowledge/documents/${encodeURIComponent(doc.id)}/retry`)
    onChanged()
  })
  return (
    <section aria-labelledby="documents-title">
      <h2 id="documents-title">Documents</h2>
      {state.status === 'loading' ? <Loading what="documents" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {retry.error ? <Refused error={retry.error} /> : null}
      {state.status === 'ok' ? (
        state.data.items.length === 0 ? (
          <Empty>
            <p>No documents yet: upload one above.</p>
          </Empty>
        ) : (
          <>
            <ul class="cards" aria-label="Documents, newest first">
              {state.data.items.map((d) => (
                <li key={d.id} class="card document">
                  <h3>{d.name}</h3>
                  <p class="meta">
                    <span class="visually-hidden">Ingestion: </span>
                    <span class={`badge state-${d.state}`}>{STATE_LABEL[d.state]}</span>{' '}
                    {d.state === 'ready' ? `${d.chunkCount} ${d.chunkCount === 1 ? 'chunk' : 'chunks'} · ` : ''}
                    {d.contentType} · {formatSize(d.size)} · {d.attempts} {d.attempts === 1 ? 'attempt' : 'attempts'} ·
                    uploaded <Time iso={d.createdAt} />
                  </p>
                  {d.lastError ? (
                    <p class="last-error">
                      Last error: <span>{d.lastError}</span>
                    </p>
                  ) : null}
                  <div class="row actions">
                    {d.state === 'failed' ? (
                      <button
                        type="button"
                        class="secondary"
                        disabled={retry.pending}
                        aria-label={`Retry ${d.name}`}
                        onClick={() => retry.run(d)}
                      >
                        Retry
                      </button>
                    ) : null}
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Delete… ${d.name}`}
                      onClick={() => setDeleting(d)}
                    >
                      Delete…
                    </button>
                  </div>
                </li>
              ))}
            </ul>
            <Pager label="Pages of documents" cursor={cursor} next={state.data.nextCursor} onChange={onPage} />
          </>
        )
      ) : null}
      <Confirm
        open={deleting !== null}
        id="delete-document-title"
        title="Delete this document?"
        action="Delete document"
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setDeleting(null)}
      >
        <p>Its file and its chunks go: runs stop finding its text.</p>
        {deleting ? <blockquote class="content">{deleting.name}</blockquote> : null}
      </Confirm>
    </section>
  )
}

const formatSize = (bytes: number) =>
  bytes < 1024
    ? `${bytes} B`
    : bytes < 1024 * 1024
      ? `${(bytes / 1024).toFixed(1)} KB`
      : `${(bytes / 1048576).toFixed(1)} MB`
