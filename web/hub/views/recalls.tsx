import { useState } from 'preact/hooks'
import { api, query, type RecallFrame, type Recalls } from '../api.js'
import { Empty, ErrorBox, Loading, NewestOlder, RunLink, Time, useLoad } from '../ui.js'

export function RecallList({ frames }: { frames: RecallFrame[] }) {
  return (
    <ul class="cards" aria-label="Recalls">
      {frames.map((f) => (
        <li key={f.id} class="card">
          <p class="content query">{f.query}</p>
          <p class="meta">
            <Time iso={f.createdAt} /> · {f.scope === 'org' ? 'organization' : 'personal'} pool · {f.itemIds.length}{' '}
            {f.itemIds.length === 1 ? 'fact' : 'facts'} recalled · {f.latencyMs} ms · <RunLink runId={f.runId} />
          </p>
        </li>
      ))}
    </ul>
  )
}

/** The recall ledger: every retrieval made for a run, newest first, each linked to the run's live view. */
export function RecallsView({ params }: { params: URLSearchParams }) {
  const runId = params.get('runId') ?? undefined
  const [cursor, setCursor] = useState<string | undefined>(undefined)
  const [state, reload] = useLoad(`recalls ${runId ?? ''} ${cursor ?? ''}`, () =>
    api<Recalls>('GET', `/memory/recalls${query({ runId, cursor, limit: 50 })}`)
  )
  return (
    <section aria-labelledby="recalls-title">
      <h1 id="recalls-title">Recall ledger</h1>
      <p class="lede">
        Each time a run looked something up in memory: the query it asked, which pool, how many facts came back. Open a
        run to follow it live.
      </p>
      {state.status === 'loading' ? <Loading what="the ledger" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        state.data.recalls.length === 0 ? (
          <Empty>
            <p>No recalls yet: runs record one each time they look something up in memory.</p>
          </Empty>
        ) : (
          <>
            <RecallList frames={state.data.recalls} />
            <NewestOlder cursor={cursor} next={state.data.nextCursor} onChange={setCursor} />
          </>
        )
      ) : null}
    </section>
  )
}
