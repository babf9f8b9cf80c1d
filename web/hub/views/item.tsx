import { useEffect, useRef, useState } from 'preact/hooks'
import { api, ApiError, query, type HistoryEntry, type MemoryHistory } from '../api.js'
import type { Identity } from '../identity.js'
import { navigate } from '../router.js'
import { ErrorBox, Link, Loading, PersonalUnavailable, RunLink, Time, useAction, useLoad } from '../ui.js'
import { scopeOf } from './browse.js'

const KIND_LABEL: Record<HistoryEntry['kind'], string> = { created: 'Created', updated: 'Updated', deleted: 'Deleted' }

/** Who changed a fact: a run (linked to its live view), a person, or the dev organization. */
function ChangedBy({ who, name }: { who: string; name: string }) {
  if (who.startsWith('run:'))
    return (
      <span>
        {' '}
        by <RunLink runId={who.slice(4)} />
      </span>
    )
  return <span> by {name}</span>
}

/** One fact: its text, its history, and the two writes a person may make (edit, delete). */
export function ItemView({ who, id, params }: { who: Identity; id: string; params: URLSearchParams }) {
  const scope = scopeOf(params)
  const scopeQuery = query({ scope })
  const back = `/${query({ scope: scope === 'org' ? undefined : scope })}`
  // personal scope without a person: nothing to read, and no write is ever sent
  const noPerson = scope === 'personal' && who.kind !== 'user'
  const [saved, setSaved] = useState(false)
  // read again after a save, the fact stays on screen meanwhile, with the text saved (not the one
  // read before): the form and the "Saved." notice do not leave the page and come back
  const [state, reload] = useLoad(
    `item ${id} ${scope}`,
    async () =>
      noPerson
        ? null
        : (await api<MemoryHistory>('GET', `/memory/item/${encodeURIComponent(id)}/history${scopeQuery}`)).history,
    { keep: saved }
  )
  const [draft, setDraft] = useState<string | null>(null)
  const [confirming, setConfirming] = useState(false)
  const dialog = useRef<HTMLDialogElement>(null)

  const history = state.status === 'ok' ? state.data : null
  const latest = history && history.length > 0 ? history[history.length - 1]! : null
  const current = latest && latest.kind !== 'deleted' ? latest.content : null
  const text = draft ?? current ?? ''

  const save = useAction(async () => {
    const content = text.trim()
    await api('PATCH', `/memory/item/${encodeURIComponent(id)}${scopeQuery}`, { scope, content })
    setDraft(content)
    setSaved(true)
    reload()
  })
  // the history read after the save has the text: the draft gives way to it
  useEffect(() => {
    if (saved && state.status === 'ok') setDraft(null)
  }, [state])
  const remove = useAction(async () => {
    await api('DELETE', `/memory/item/${encodeURIComponent(id)}${scopeQuery}`)
    setConfirming(false)
    navigate(back)
  })

  useEffect(() => {
    const d = dialog.current
    if (!d) return
    if (confirming && !d.open) d.showModal()
    if (!confirming && d.open) d.close()
  }, [confirming])

  if (noPerson) {
    return (
      <section aria-labelledby="item-title">
        <h1 id="item-title">A personal fact</h1>
        <PersonalUnavailable />
      </section>
    )
  }
  const notFound = state.status === 'error' && state.error instanceof ApiError && state.error.status === 404
  return (
    <section aria-labelledby="item-title">
      <p class="crumbs">
        <Link to={back}>← Back to the {scope === 'org' ? 'organization' : 'personal'} pool</Link>
      </p>
      <h1 id="item-title">A stored fact</h1>
      {state.status === 'loading' ? <Loading what="this fact" /> : null}
      {notFound ? (
        <div class="state empty" role="status">
          <p>
            This fact is not in the {scope === 'org' ? 'organization' : 'personal'} pool (it may have been deleted).
          </p>
        </div>
      ) : null}
      {state.status === 'error' && !notFound ? <ErrorBox error={state.error} retry={reload} /> : null}
      {history ? (
        <>
          {current === null ? (
            <div class="state empty" role="status">
              <p>This fact was deleted.</p>
            </div>
          ) : (
            <form
              class="edit"
              onSubmit={(e) => {
                e.preventDefault()
                if (text.trim() !== '' && text.trim() !== current) save.run()
              }}
            >
              <label for="content">Content</label>
              <textarea
                id="content"
                rows={4}
                maxLength={4000}
                value={text}
                onInput={(e) => {
                  setSaved(false)
                  setDraft((e.target as HTMLTextAreaElement).value)
                }}
              />
              <div class="row">
                <button type="submit" disabled={save.pending || saved || text.trim() === '' || text.trim() === current}>
                  {save.pending ? 'Saving…' : 'Save changes'}
                </button>
                <button type="button" class="danger" disabled={remove.pending} onClick={() => setConfirming(true)}>
                  Delete…
                </button>
                {saved ? (
                  <span role="status" class="ok">
                    Saved.
                  </span>
                ) : null}
              </div>
              {save.error ? <ErrorBox error={save.error} /> : null}
            </form>
          )}
          <h2>History</h2>
          <ol class="history" aria-label="History, oldest first">
            {history.map((h, i) => (
              <li key={i} class={`kind-${h.kind}`}>
                <p class="meta">
                  <strong>{KIND_LABEL[h.kind]}</strong> <Time iso={h.changedAt} />
                  <ChangedBy who={h.changedBy} name={h.changedByName} />
                </p>
                <p class="content">{h.content}</p>
              </li>
            ))}
          </ol>
        </>
      ) : null}
      <dialog ref={dialog} aria-labelledby="confirm-title" onClose={() => setConfirming(false)}>
        <h2 id="confirm-title">Delete this fact?</h2>
        <p>It leaves the pool at once: runs stop recalling it. Its history is kept.</p>
        {current !== null ? <blockquote class="content">{current}</blockquote> : null}
        {remove.error ? <ErrorBox error={remove.error} /> : null}
        <div class="row">
          <button type="button" class="danger" disabled={remove.pending} onClick={() => remove.run()}>
            {remove.pending ? 'Deleting…' : 'Delete'}
          </button>
          <button type="button" class="secondary" onClick={() => setConfirming(false)} autoFocus>
            Cancel
          </button>
        </div>
      </dialog>
    </section>
  )
}
