import { useState } from 'preact/hooks'
import { api, query, CAPTURE_STATES, type Capture, type CaptureList } from '../api.js'
import { navigate } from '../router.js'
import { Empty, ErrorBox, Loading, NewestOlder, RunLink, Time, useAction, useLoad } from '../ui.js'

const FILTERS = [
  { value: '', label: 'All' },
  { value: 'orphan', label: 'Orphans' },
  ...CAPTURE_STATES.map((s) => ({ value: s, label: s[0]!.toUpperCase() + s.slice(1) }))
]

function OrphanExplained() {
  return (
    <aside class="explain" aria-labelledby="orphan-what">
      <h2 id="orphan-what">What is an orphan?</h2>
      <p>
        When a run finishes, its facts wait here to be written into the memory pool. A worker takes one, marks it{' '}
        <em>delivering</em> and holds it for a short lease. An <strong>orphan</strong> is a delivery whose worker
        stopped (it crashed, or lost the database) before saying whether the write succeeded, and whose lease ran out.
      </p>
      <p>
        Cairn never retries an orphan by itself: the write may already have happened, and a retry could store the facts
        twice. Check the pool (search for the run's facts): if they are there, choose <strong>Mark delivered</strong>;
        if not, or you do not want them, choose <strong>Discard</strong>. Either choice is final.
      </p>
    </aside>
  )
}

function CaptureRow({ capture, onDone }: { capture: Capture; onDone: (message: string) => void }) {
  const id = encodeURIComponent(capture.runId)
  const retry = useAction(async () => {
    await api('POST', `/memory/captures/${id}/retry`)
    onDone(`The capture of run ${capture.runId.slice(-8)} is pending again, with a fresh budget of attempts.`)
  })
  const resolve = useAction(async (resolution: 'delivered' | 'discard') => {
    await api('POST', `/memory/captures/${id}/resolve`, { resolution })
    onDone(
      resolution === 'delivered'
        ? `The capture of run ${capture.runId.slice(-8)} is marked delivered.`
        : `The capture of run ${capture.runId.slice(-8)} is discarded.`
    )
  })
  const busy = retry.pending || resolve.pending
  const state = capture.orphan ? 'orphan' : capture.state
  return (
    <li class="card capture" data-run={capture.runId}>
      <p class="row">
        <span class={`badge state-${state}`}>{capture.orphan ? 'orphan (delivering)' : capture.state}</span>
        <RunLink runId={capture.runId} />
        <span class="muted">
          {capture.itemCount} {capture.itemCount === 1 ? 'fact' : 'facts'} · attempt {capture.attempts} of{' '}
          {capture.maxAttempts}
        </span>
      </p>
      {capture.lastError ? (
        <p class="last-error">
          Last error: <span>{capture.lastError}</span>
        </p>
      ) : null}
      <p class="meta">
        Queued <Time iso={capture.createdAt} /> · updated <Time iso={capture.updatedAt} />
        {capture.state === 'pending' ? (
          <span>
            {' '}
            · next attempt <Time iso={capture.nextAttemptAt} />
          </span>
        ) : null}
        {capture.deliveredAt ? (
          <span>
            {' '}
            · delivered <Time iso={capture.deliveredAt} />
          </span>
        ) : null}
      </p>
      {capture.state === 'dead' || capture.orphan ? (
        <div class="row actions">
          {capture.state === 'dead' ? (
            <button type="button" disabled={busy} onClick={() => retry.run()}>
              {retry.pending ? 'Retrying…' : 'Retry'}
            </button>
          ) : null}
          {capture.orphan ? (
            <>
              <button type="button" disabled={busy} onClick={() => resolve.run('delivered')}>
                Mark delivered
              </button>
              <button type="button" class="danger" disabled={busy} onClick={() => resolve.run('discard')}>
                Discard
              </button>
            </>
          ) : null}
        </div>
      ) : null}
      {retry.error || resolve.error ? <ErrorBox error={retry.error ?? resolve.error} /> : null}
    </li>
  )
}

/** The capture outbox: each run's facts on their way into the pool, and the ones that need a person. */
export function CapturesView({ params }: { params: URLSearchParams }) {
  // an address typed by hand may name no filter: all, rather than a request the server refuses
  const asked = params.get('state') ?? ''
  const filter = FILTERS.some((f) => f.value === asked) ? asked : ''
  const [cursor, setCursor] = useState<string | undefined>(undefined)
  const [message, setMessage] = useState('')
  const apiState = filter === 'orphan' ? 'delivering' : filter
  const [state, reload] = useLoad(`captures ${filter} ${cursor ?? ''}`, () =>
    api<CaptureList>('GET', `/memory/captures${query({ state: apiState, cursor, limit: 50 })}`)
  )
  const shown = state.status === 'ok' ? state.data.captures.filter((c) => filter !== 'orphan' || c.orphan) : []
  const anyOrphan = shown.some((c) => c.orphan)
  return (
    <section aria-labelledby="captures-title">
      <div class="heading">
        <h1 id="captures-title">Capture outbox</h1>
        <label class="filter">
          <span>Show</span>
          <select
            value={filter}
            onChange={(e) => {
              setCursor(undefined)
              setMessage('')
              navigate(`/captures${query({ state: (e.target as HTMLSelectElement).value })}`)
            }}
          >
            {FILTERS.map((f) => (
              <option key={f.value} value={f.value}>
                {f.label}
              </option>
            ))}
          </select>
        </label>
      </div>
      <p class="lede">
        Facts captured by runs, newest first, on their way into the memory pool. Dead captures ran out of attempts and
        can be retried; orphans need a decision.
      </p>
      {message ? (
        <p class="ok" role="status">
          {message}
        </p>
      ) : null}
      {filter === 'orphan' || anyOrphan ? <OrphanExplained /> : null}
      {state.status === 'loading' ? <Loading what="the outbox" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        shown.length === 0 ? (
          <Empty>
            <p>
              {filter === ''
                ? 'The outbox is empty: no run has captured anything yet.'
                : `No ${filter === 'orphan' ? 'orphaned' : filter} captures.`}
            </p>
          </Empty>
        ) : (
          <>
            <ul class="cards" aria-label="Captures">
              {shown.map((c) => (
                <CaptureRow
                  key={`${c.runId} ${c.state} ${c.updatedAt}`}
                  capture={c}
                  onDone={(m) => {
                    setMessage(m)
                    reload()
                  }}
                />
              ))}
            </ul>
            <NewestOlder cursor={cursor} next={state.data.nextCursor} onChange={setCursor} />
          </>
        )
      ) : null}
    </section>
  )
}
