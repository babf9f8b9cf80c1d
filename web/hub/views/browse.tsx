import { useState } from 'preact/hooks'
import { api, ApiError, query, type AddedItem, type BrowseResult, type Scope } from '../api.js'
import { navigate } from '../router.js'
import {
  Empty,
  ErrorBox,
  Link,
  Loading,
  MemoryOff,
  PersonalUnavailable,
  RunLink,
  ScopePicker,
  Time,
  useAction,
  useLoad
} from '../ui.js'

export const scopeOf = (params: URLSearchParams): Scope => (params.get('scope') === 'personal' ? 'personal' : 'org')
const PAGE = 50

/** Browse: a pool's facts, newest first, a page at a time. */
export function BrowseView({ params }: { params: URLSearchParams }) {
  const scope = scopeOf(params)
  const cursor = params.get('cursor') ?? undefined
  // the cursors of the pages before this one, for "Newer"
  const [back, setBack] = useState<Array<string | undefined>>([])
  // the fact just added, said once the list shows it
  const [added, setAdded] = useState<string | null>(null)
  const [state, reload] = useLoad(`browse ${scope} ${cursor ?? ''}`, () =>
    api<BrowseResult>('GET', `/memory/browse${query({ scope, limit: PAGE, cursor })}`)
  )
  const go = (next: { scope?: Scope; cursor?: string | undefined }) => {
    navigate(
      `/${query({ scope: (next.scope ?? scope) === 'org' ? undefined : (next.scope ?? scope), cursor: next.cursor })}`
    )
  }
  const changeScope = (s: Scope) => {
    setBack([])
    go({ scope: s, cursor: undefined })
  }
  return (
    <section aria-labelledby="browse-title">
      <div class="heading">
        <h1 id="browse-title">Browse memory</h1>
        <ScopePicker scope={scope} onChange={changeScope} />
      </div>
      {state.status === 'loading' ? <Loading what="memory" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok'
        ? (() => {
            const r = state.data
            if (r.failedClosed) return <PersonalUnavailable />
            if (!r.enabled) return <MemoryOff />
            const form = (
              <AddFact
                scope={scope}
                done={added}
                added={(text) => {
                  setAdded(text)
                  setBack([])
                  if (cursor) go({ cursor: undefined })
                  else reload()
                }}
              />
            )
            if (r.items.length === 0) {
              return (
                <>
                  {form}
                  <Empty>
                    <p>
                      {cursor
                        ? 'No more facts on this page.'
                        : `The ${scope === 'org' ? 'organization' : 'personal'} pool is empty.`}{' '}
                      Facts appear here when you add one above, or when a run captures them (a model's remember tool, or
                      a sentence with “remember” in an echo run).
                    </p>
                  </Empty>
                </>
              )
            }
            const first = back.length * PAGE + 1
            return (
              <>
                {form}
                <p class="summary" role="status">
                  {r.total.toLocaleString()} {r.total === 1 ? 'fact' : 'facts'} in the{' '}
                  {scope === 'org' ? 'organization' : 'personal'} pool, newest first. Showing {first.toLocaleString()}–
                  {(first + r.items.length - 1).toLocaleString()}.
                </p>
                <ul class="cards" aria-label="Stored facts">
                  {r.items.map((item) => (
                    <li key={item.id} class="card">
                      <p class="content">{item.content}</p>
                      <p class="meta">
                        <Time iso={item.createdAt} />
                        {item.updatedAt !== item.createdAt ? (
                          <span>
                            {' '}
                            · edited <Time iso={item.updatedAt} />
                          </span>
                        ) : null}
                        <span> · </span>
                        <RunLink runId={item.sourceRunId} />
                        <span> · </span>
                        <Link
                          to={`/items/${encodeURIComponent(item.id)}${query({ scope: scope === 'org' ? undefined : scope })}`}
                          aria-label={`Open, edit or delete: ${item.content.slice(0, 60)}`}
                        >
                          Open, edit or delete
                        </Link>
                      </p>
                    </li>
                  ))}
                </ul>
                <nav class="pager" aria-label="Pages">
                  <button
                    type="button"
                    class="secondary"
                    disabled={back.length === 0}
                    onClick={() => {
                      const prev = back[back.length - 1]
                      setBack(back.slice(0, -1))
                      go({ cursor: prev })
                    }}
                  >
                    ← Newer
                  </button>
                  <button
                    type="button"
                    class="secondary"
                    disabled={r.nextCursor === null}
                    onClick={() => {
                      setBack([...back, cursor])
                      go({ cursor: r.nextCursor ?? undefined })
                    }}
                  >
                    Older →
                  </button>
                </nav>
              </>
            )
          })()
        : null}
    </section>
  )
}

/** "Add a fact": a person writes a fact into the pool shown. */
function AddFact({ scope, done, added }: { scope: Scope; done: string | null; added: (text: string) => void }) {
  const [content, setContent] = useState('')
  const add = useAction(async (text: string) => {
    await api<AddedItem>('POST', '/memory/items', { scope, content: text })
    setContent('')
    added(text)
  })
  const submit = (e: Event) => {
    e.preventDefault()
    if (content.trim() !== '') add.run(content.trim())
  }
  return (
    <form class="card add-fact" onSubmit={submit} aria-labelledby="add-fact-title">
      <h2 id="add-fact-title">Add a fact</h2>
      <label for="add-fact-content">
        A fact for the {scope === 'org' ? 'organization' : 'personal'} pool, in a sentence that stands on its own
      </label>
      <textarea
        id="add-fact-content"
        rows={2}
        maxLength={4000}
        required
        value={content}
        onInput={(e) => setContent((e.target as HTMLTextAreaElement).value)}
      />
      <div class="actions">
        <button type="submit" disabled={add.pending || content.trim() === ''}>
          {add.pending ? 'Adding…' : 'Add fact'}
        </button>
      </div>
      {done !== null ? (
        <p role="status" class="muted">
          Added: {done}
        </p>
      ) : null}
      {add.error instanceof ApiError && add.error.status === 409 ? (
        <p class="state notice" role="alert">
          The pool already holds this fact.
        </p>
      ) : add.error ? (
        <ErrorBox error={add.error} />
      ) : null}
    </form>
  )
}
