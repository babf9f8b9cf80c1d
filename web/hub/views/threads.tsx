import { useEffect, useRef, useState } from 'preact/hooks'
import {
  api,
  ApiError,
  query,
  type Approvals,
  type Models,
  type Run,
  type RunReply,
  type ThreadList,
  type ThreadWithRuns
} from '../api.js'
import { isAdmin, type Identity } from '../identity.js'
import { navigate } from '../router.js'
import { Empty, ErrorBox, Link, Loading, Time, useAction, useLoad } from '../ui.js'
import { useRunStream, type ToolCallView } from './run.js'
import { TranscriptCalls } from './transcript.js'

const LIVE = new Set<Run['status']>(['queued', 'running', 'requires_action'])

/** The message box: a new conversation, or the next message of one (a follow-up run in the thread). */
function MessageBox({
  rootRunId,
  threadModel = null,
  sent
}: {
  rootRunId: string | null
  /** the model of the conversation's latest turn: the next message goes on with it unless the person picks another */
  threadModel?: string | null
  sent: (run: Run) => void
}) {
  const [prompt, setPrompt] = useState('')
  const box = useRef<HTMLTextAreaElement>(null)
  const [model, setModel] = useState(threadModel ?? '')
  const [models] = useLoad('models', () => api<Models>('GET', '/models'))
  const send = useAction(async () => {
    const body: Record<string, unknown> = { prompt: prompt.trim() }
    if (rootRunId) body.rootRunId = rootRunId
    if (model) body.model = model
    const { run } = await api<RunReply>('POST', '/runs', body)
    setPrompt('')
    sent(run)
    // the next message of the conversation can be typed at once (a new one goes to its page)
    if (rootRunId) box.current?.focus()
  })
  const list = models.status === 'ok' ? models.data.items : []
  return (
    <form
      class="card stack message-box"
      onSubmit={(e) => {
        e.preventDefault()
        if (prompt.trim() !== '') send.run()
      }}
      aria-labelledby="message-title"
    >
      <h2 id="message-title">{rootRunId ? 'Your message' : 'Start a conversation'}</h2>
      <label for="message">Message</label>
      <textarea
        id="message"
        ref={box}
        rows={3}
        maxLength={100_000}
        required
        value={prompt}
        onInput={(e) => setPrompt((e.target as HTMLTextAreaElement).value)}
      />
      <label for="model">Model</label>
      <select id="model" value={model} onChange={(e) => setModel((e.target as HTMLSelectElement).value)}>
        <option value="">
          The organization's default{list.find((m) => m.default) ? ` (${list.find((m) => m.default)!.id})` : ''}
        </option>
        {threadModel !== null && !list.some((m) => m.id === threadModel) ? (
          <option value={threadModel}>{threadModel} (this conversation's)</option>
        ) : null}
        {list.map((m) => (
          <option key={`${m.engine}/${m.id}`} value={m.id}>
            {m.id}
            {m.id === threadModel ? " (this conversation's)" : ''}
          </option>
        ))}
      </select>
      <button type="submit" disabled={send.pending || prompt.trim() === ''}>
        {send.pending ? 'Sending…' : 'Send'}
      </button>
      {send.error ? <ErrorBox error={send.error} /> : null}
    </form>
  )
}

/** The org's conversations, newest first, and a box to start one. */
export function ThreadsView({ params }: { params: URLSearchParams }) {
  const cursor = params.get('cursor') ?? undefined
  const [state, reload] = useLoad(`threads ${cursor ?? ''}`, () =>
    api<ThreadList>('GET', `/threads${query({ limit: 50, cursor })}`)
  )
  return (
    <section aria-labelledby="threads-title">
      <h1 id="threads-title">Conversations</h1>
      <MessageBox rootRunId={null} sent={(run) => navigate(`/threads/${encodeURIComponent(run.rootRunId)}`)} />
      {state.status === 'loading' ? <Loading what="conversations" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        state.data.items.length === 0 ? (
          <Empty>
            <p>No conversations yet: start one above.</p>
          </Empty>
        ) : (
          <>
            <ul class="cards" aria-label="Conversations">
              {state.data.items.map((thread) => (
                <li key={thread.rootRunId} class="card">
                  <p class="content">
                    <Link to={`/threads/${encodeURIComponent(thread.rootRunId)}`}>{thread.title}</Link>
                  </p>
                  <p class="meta">
                    <span class={`badge status-${thread.latestStatus}`}>{thread.latestStatus}</span> · {thread.runCount}{' '}
                    {thread.runCount === 1 ? 'message' : 'messages'} · <Time iso={thread.updatedAt} />
                  </p>
                </li>
              ))}
            </ul>
            {state.data.nextCursor ? (
              <p>
                <Link to={`/threads${query({ cursor: state.data.nextCursor })}`}>Older conversations →</Link>
              </p>
            ) : null}
          </>
        )
      ) : null}
    </section>
  )
}

/** The tool calls of the run in progress, as its live events tell them. */
function ToolCalls({ calls }: { calls: ToolCallView[] }) {
  if (calls.length === 0) return null
  return (
    <ol class="tool-calls" aria-label="Tool calls">
      {calls.map((c) => (
        <li key={c.callId}>
          <p>
            <strong>{c.tool}</strong> <code>{JSON.stringify(c.arguments)}</code>
            {c.status ? <span class="muted"> · {c.status}</span> : <span class="muted"> · waiting</span>}
          </p>
          {c.content !== undefined ? <pre class="tool-result">{c.content}</pre> : null}
        </li>
      ))}
    </ol>
  )
}

/**
 * Whether the console's person may decide the run's tool calls: the person who started it, or
 * an owner or admin of the organization (the dev org of this machine acts as its owner).
 * Anyone else sees what waits, and who decides it.
 */
export const mayDecide = (who: Identity, run: Pick<Run, 'userId'>): boolean =>
  isAdmin(who) || (who.kind === 'user' && run.userId !== null && run.userId === who.session.user.id)

/**
 * The pending calls of a run waiting for people: each with its tool and arguments; approve or
 * deny for those who may decide, a notice of who decides for the others. Each approval event and
 * each decision reads them again; what is shown stays until the new answer replaces it, so the
 * box never empties and fills again (a button keeps its place and the keyboard focus). One box
 * belongs to one run (its caller keys it by the run).
 */
function PendingApprovals({ runId, version, decides }: { runId: string; version: number; decides: boolean }) {
  const [state, reload] = useLoad(
    `approvals ${runId} ${version}`,
    () => api<Approvals>('GET', `/runs/${encodeURIComponent(runId)}/approvals`),
    { keep: true }
  )
  const decide = useAction(async (approvalId: string, decision: 'approve' | 'deny') => {
    await api('POST', `/runs/${encodeURIComponent(runId)}/approvals/${encodeURIComponent(approvalId)}`, { decision })
    reload()
  })
  if (state.status !== 'ok') return state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null
  const pending = state.data.items.filter((a) => a.status === 'pending')
  if (pending.length === 0) return null
  const title = decides ? 'Waiting for your decision' : 'Waiting for a decision'
  return (
    <div class="card approvals" role="region" aria-label={`Tool calls ${title.toLowerCase()}`}>
      <h3>{title}</h3>
      {decides ? null : (
        <p class="state notice">
          These calls wait for the person who started this run, or an owner or admin of the organization, to approve or
          deny them.
        </p>
      )}
      <ul>
        {pending.map((a) => (
          <li key={a.id}>
            <p>
              <strong>{a.tool}</strong> wants to run with
            </p>
            <pre>{JSON.stringify(a.arguments, null, 2)}</pre>
            <p class="muted">
              Expires <Time iso={a.expiresAt} />
            </p>
            {decides ? (
              <>
                <button
                  type="button"
                  disabled={decide.pending}
                  onClick={() => decide.run(a.id, 'approve')}
                  aria-label={`Approve ${a.tool}`}
                >
                  Approve
                </button>{' '}
                <button
                  type="button"
                  class="secondary"
                  disabled={decide.pending}
                  onClick={() => decide.run(a.id, 'deny')}
                  aria-label={`Deny ${a.tool}`}
                >
                  Deny
                </button>
              </>
            ) : null}
          </li>
        ))}
      </ul>
      {decide.error instanceof ApiError && decide.error.status === 409 ? (
        <p class="state notice" role="alert">
          This call was decided already, or has expired.
        </p>
      ) : decide.error ? (
        <ErrorBox error={decide.error} />
      ) : null}
    </div>
  )
}

/** The run that has not ended yet: its text, tool calls and results as they stream, its approvals, cancel. */
function LiveRun({ run, ended, decides }: { run: Run; ended: () => void; decides: boolean }) {
  const live = useRunStream(run.id)
  const status = live.status ?? run.status
  const cancel = useAction(async () => {
    await api('POST', `/runs/${encodeURIComponent(run.id)}/cancel`)
  })
  useEffect(() => {
    if (!LIVE.has(status)) ended()
  }, [status])
  return (
    <li class="turn">
      <p class="prompt">
        <span class="who-said">You</span> {run.prompt}
      </p>
      <div class="answer">
        <p class="meta">
          <span class={`badge status-${status}`}>{status}</span>{' '}
          {run.model ? <span class="muted">{run.model}</span> : null}
        </p>
        <ToolCalls calls={live.tools} />
        {/* shown while the run is live, not only while its status says it waits: the stream
            replays the run's events on connect, so a run read as waiting passes through
            "running" again for a moment, and the box (with the focus on its buttons) must not
            vanish and come back meanwhile; with nothing pending it shows nothing */}
        {LIVE.has(status) ? (
          <PendingApprovals key={run.id} runId={run.id} version={live.approvals} decides={decides} />
        ) : null}
        <div class="output content" aria-live="polite" aria-label="Answer">
          {live.text === '' ? <span class="muted">(no text yet)</span> : live.text}
        </div>
        {LIVE.has(status) ? (
          <button type="button" class="secondary" disabled={cancel.pending} onClick={() => cancel.run()}>
            Cancel
          </button>
        ) : null}
        {cancel.error ? <ErrorBox error={cancel.error} /> : null}
      </div>
    </li>
  )
}

/** A turn that has ended: its tool calls and results from its transcript (its events are not read again). */
function FinishedRun({ run }: { run: ThreadWithRuns['runs'][number] }) {
  return (
    <li class="turn">
      <p class="prompt">
        <span class="who-said">You</span> {run.prompt}
      </p>
      <div class="answer">
        <p class="meta">
          <span class={`badge status-${run.status}`}>{run.status}</span>{' '}
          {run.model ? <span class="muted">{run.model}</span> : null} ·{' '}
          <Link to={`/runs/${encodeURIComponent(run.id)}`}>events</Link>
        </p>
        <TranscriptCalls messages={run.messages} />
        {run.output ? <div class="output content">{run.output}</div> : null}
        {run.error ? <p class="state error">{run.error}</p> : null}
      </div>
    </li>
  )
}

/**
 * One conversation: each run's prompt, tool calls and answer from the thread's one read (each
 * run carries its transcript), the run in progress streamed from its own events, and the box
 * for the next message.
 */
export function ThreadView({ who, id }: { who: Identity; id: string }) {
  const [version, setVersion] = useState(0)
  // the same conversation read again (a turn sent or ended) stays on screen meanwhile; another one does not
  const [state, reload] = useLoad(
    `thread ${id} ${version}`,
    () => api<ThreadWithRuns>('GET', `/threads/${encodeURIComponent(id)}`),
    { keep: version > 0 }
  )
  const again = () => setVersion((v) => v + 1)
  return (
    <section aria-labelledby="thread-title">
      <p class="crumbs">
        <Link to="/threads">← Conversations</Link> ·{' '}
        <Link to={`/skills?thread=${encodeURIComponent(id)}`}>Run a skill here</Link>
      </p>
      {state.status === 'loading' ? <Loading what="the conversation" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <>
          <h1 id="thread-title">{state.data.thread.title}</h1>
          <ol class="conversation" aria-label="Conversation">
            {state.data.runs.map((run) =>
              LIVE.has(run.status) ? (
                <LiveRun key={run.id} run={run} ended={again} decides={mayDecide(who, run)} />
              ) : (
                <FinishedRun key={run.id} run={run} />
              )
            )}
          </ol>
          <MessageBox
            rootRunId={id}
            threadModel={state.data.runs.findLast((run) => run.model !== null)?.model ?? null}
            sent={again}
          />
        </>
      ) : null}
    </section>
  )
}
