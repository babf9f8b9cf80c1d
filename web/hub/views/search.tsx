import { useEffect, useState } from 'preact/hooks'
import { api, query, type Scope, type SearchResult } from '../api.js'
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
  useLoad
} from '../ui.js'
import { scopeOf } from './browse.js'

/** Search: the pool's best matches for a query, each with the run it came from. */
export function SearchView({ params }: { params: URLSearchParams }) {
  const scope = scopeOf(params)
  const q = params.get('q') ?? ''
  const [text, setText] = useState(q)
  useEffect(() => setText(q), [q])
  const go = (next: { q?: string; scope?: Scope }) => {
    const s = next.scope ?? scope
    navigate(`/search${query({ q: (next.q ?? q).trim(), scope: s === 'org' ? undefined : s })}`)
  }
  const [state, reload] = useLoad(`search ${scope} ${q}`, async () =>
    q.trim() === '' ? null : api<SearchResult>('GET', `/memory/search${query({ scope, q, limit: 50 })}`)
  )
  return (
    <section aria-labelledby="search-title">
      <div class="heading">
        <h1 id="search-title">Search memory</h1>
        <ScopePicker scope={scope} onChange={(s) => go({ scope: s })} />
      </div>
      <form
        role="search"
        class="search"
        onSubmit={(e) => {
          e.preventDefault()
          go({ q: text })
        }}
      >
        <label for="q">Search for</label>
        <div class="row">
          <input
            id="q"
            name="q"
            type="search"
            value={text}
            onInput={(e) => setText((e.target as HTMLInputElement).value)}
            placeholder="words from a fact"
            autoComplete="off"
          />
          <button type="submit">Search</button>
        </div>
      </form>
      {state.status === 'loading' ? <Loading what="results" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok'
        ? (() => {
            const r = state.data
            if (r === null)
              return (
                <Empty>
                  <p>Type some words and press Enter: Cairn ranks the pool's facts by how well they match.</p>
                </Empty>
              )
            if (r.failedClosed) return <PersonalUnavailable />
            if (!r.enabled) return <MemoryOff />
            if (r.items.length === 0)
              return (
                <Empty>
                  <p>
                    Nothing in the {scope === 'org' ? 'organization' : 'personal'} pool matches “{q}”.
                  </p>
                </Empty>
              )
            return (
              <>
                <p class="summary" role="status">
                  {r.items.length} {r.items.length === 1 ? 'match' : 'matches'} for “{q}”
                  {r.truncated ? ' (more matched: refine the query)' : ''}, in {Math.round(r.latencyMs)} ms.
                </p>
                <ol class="cards" aria-label="Search results">
                  {r.items.map((item) => (
                    <li key={item.id} class="card">
                      <p class="content">{item.content}</p>
                      <p class="meta">
                        <span>score {item.score.toFixed(2)}</span>
                        <span> · </span>
                        <span class="matched">{matchedBy(item.scores)}</span>
                        <span> · </span>
                        <Time iso={item.citation.createdAt} />
                        <span> · </span>
                        <RunLink runId={item.citation.runId} />
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
                </ol>
              </>
            )
          })()
        : null}
    </section>
  )
}

/** Why an item is a hit: its words matched the query, its meaning did, or both. */
function matchedBy(scores: { fulltext: number | null; semantic: number | null }): string {
  if (scores.fulltext !== null && scores.semantic !== null) return 'matched by words and meaning'
  return scores.semantic !== null ? 'matched by meaning' : 'matched by words'
}
