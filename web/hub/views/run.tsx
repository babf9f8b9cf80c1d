import { useEffect, useState } from 'preact/hooks'
import { api, query, type Recalls, type Run, type RunEventFrame, type RunReply } from '../api.js'
import { Empty, ErrorBox, Link, Loading, Time, useLoad } from '../ui.js'
import { RecallList } from './recalls.js'
import { RunTimeline } from './run-timeline.js'
import { TranscriptView, type TranscriptReply } from './transcript.js'

const EVENT_TYPES = [
  'run.queued',
  'run.started',
  'message.delta',
  'message.completed',
  'tool.call',
  'tool.result',
  'memory.recalled',
  'memory.captured',
  'artifact.created',
  'approval.requested',
  'approval.resolved',
  'approval.expired',
  'run.requires_action',
  'run.succeeded',
  'run.failed',
  'run.cancelled'
] as const
/** The statuses of a run that has not ended. */
const LIVE = new Set<Run['status']>(['queued', 'running', 'requires_action'])
const TERMINAL: Record<string, Run['status']> = {
  'run.succeeded': 'succeeded',
  'run.failed': 'failed',
  'run.cancelled': 'cancelled'
}

interface Logged {
  id: string
  type: string
  at: string
}
/** A tool call of the run as its events tell it: asked, then answered (status and the text the model got). */
export interface ToolCallView {
  callId: string
  tool: string
  arguments: unknown
  status?: string
  content?: string
}
type Stream = 'connecting' | 'live' | 'reconnecting' | 'ended' | 'failed'

/** Follows /api/runs/:id/events (the whole history first, then live) and shows the text as it streams. */
export function useRunStream(id: string) {
  const [text, setText] = useState('')
  const [log, setLog] = useState<Logged[]>([])
  const [tools, setTools] = useState<ToolCallView[]>([])
  // moves on with each approval event: a view of the pending calls reads them again
  const [approvals, setApprovals] = useState(0)
  const [status, setStatus] = useState<Run['status'] | null>(null)
  const [stream, setStream] = useState<Stream>('connecting')
  useEffect(() => {
    setText('')
    setLog([])
    setTools([])
    setStatus(null)
    setStream('connecting')
    const source = new EventSource(`/api/runs/${encodeURIComponent(id)}/events`)
    source.onopen = () => setStream('live')
    source.onerror = () => setStream(source.readyState === EventSource.CLOSED ? 'failed' : 'reconnecting')
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (event) => {
        const e = event as MessageEvent<string>
        // each frame is the stored event: {id, runId, rootRunId, type, createdAt, data}
        let data: Record<string, unknown> = {}
        try {
          data = (JSON.parse(e.data) as RunEventFrame).data
        } catch {
          // an event without a JSON body still shows in the log
        }
        // handed back to the queue (a deploy, a database outage): the run starts over
        if (type === 'run.queued' && data.requeued === true) setText('')
        if (type === 'message.delta' && typeof data.text === 'string') setText((t) => t + (data.text as string))
        if (type === 'message.completed' && typeof data.text === 'string') setText(data.text)
        if (type === 'tool.call') {
          const call = { callId: String(data.callId), tool: String(data.tool), arguments: data.arguments }
          setTools((list) => (list.some((c) => c.callId === call.callId) ? list : [...list, call]))
        }
        if (type === 'tool.result') {
          setTools((list) =>
            list.map((c) =>
              c.callId === String(data.callId)
                ? { ...c, status: String(data.status), content: String(data.content ?? '') }
                : c
            )
          )
        }
        if (type === 'approval.requested' || type === 'approval.resolved' || type === 'approval.expired')
          setApprovals((n) => n + 1)
        if (type === 'run.started') setStatus('running')
        // waiting for people to decide its tool calls, without a worker
        if (type === 'run.requires_action') setStatus('requires_action')
        if (TERMINAL[type]) setStatus(TERMINAL[type]!)
        if (type !== 'message.delta') setLog((l) => [...l, { id: e.lastEventId, type, at: new Date().toISOString() }])
      })
    }
    source.addEventListener('end', () => {
      source.close()
      setStream('ended')
    })
    return () => source.close()
  }, [id])
  return { text, log, tools, approvals, status, stream }
}

const STREAM_LABEL: Record<Stream, string> = {
  connecting: 'Connecting to the event stream…',
  live: 'Live: following the run’s events.',
  reconnecting: 'The connection dropped; reconnecting (nothing is missed)…',
  ended: 'The run has finished; the stream ended.',
  failed: 'The event stream is closed.'
}

export function RunView({ id }: { id: string }) {
  const [run, reload] = useLoad(
    `run ${id}`,
    async () => (await api<RunReply>('GET', `/runs/${encodeURIComponent(id)}`)).run
  )
  const [recalls] = useLoad(`run recalls ${id}`, () =>
    api<Recalls>('GET', `/memory/recalls${query({ runId: id, limit: 50 })}`)
  )
  const live = useRunStream(id)
  // a run read as ended is final: the stream replays its events on connect (passing through
  // "running" again, its text growing word by word from nothing), which would take the status,
  // the text and the transcript back through the run's life on a page that has them whole
  const final = run.status === 'ok' && !LIVE.has(run.data.status) ? run.data : null
  const status = final ? final.status : (live.status ?? (run.status === 'ok' ? run.data.status : null))
  // the transcript is read again once the run has ended (its last messages are stored then)
  const ended = status !== null && !LIVE.has(status)
  const [transcript, reloadTranscript] = useLoad(
    `run messages ${id} ${ended}`,
    () => api<TranscriptReply>('GET', `/runs/${encodeURIComponent(id)}/messages`),
    { keep: true }
  )
  const messages = transcript.status === 'ok' ? transcript.data.items : []
  return (
    <section aria-labelledby="run-title">
      <p class="crumbs">
        <Link to="/recalls">← Recall ledger</Link>
      </p>
      <h1 id="run-title">
        Run <code>{id.slice(-8)}</code>
      </h1>
      {run.status === 'loading' ? <Loading what="the run" /> : null}
      {run.status === 'error' ? <ErrorBox error={run.error} retry={reload} /> : null}
      {run.status === 'ok' ? (
        <dl class="facts">
          <div>
            <dt>Status</dt>
            <dd>
              <span class={`badge status-${status ?? 'queued'}`}>{status}</span>
            </dd>
          </div>
          <div>
            <dt>Engine</dt>
            <dd>
              {run.data.engine}
              {run.data.model ? ` · ${run.data.model}` : ''}
            </dd>
          </div>
          <div>
            <dt>Started</dt>
            <dd>
              <Time iso={run.data.createdAt} />
            </dd>
          </div>
          <div class="wide">
            <dt>Prompt</dt>
            <dd class="content">{run.data.prompt}</dd>
          </div>
          {run.data.error ? (
            <div class="wide">
              <dt>Error</dt>
              <dd>{run.data.error}</dd>
            </div>
          ) : null}
        </dl>
      ) : null}
      <h2>Output</h2>
      <p class="muted" role="status">
        {STREAM_LABEL[live.stream]}
      </p>
      <div class="output content" aria-live="polite" aria-label="Run output">
        {final?.output ? (
          final.output
        ) : live.text !== '' ? (
          live.text
        ) : run.status === 'ok' && run.data.output ? (
          run.data.output
        ) : (
          <span class="muted">(no text yet)</span>
        )}
      </div>
      <RunTimeline id={id} transcript={messages} />
      <section aria-labelledby="transcript-title">
        <h2 id="transcript-title">Conversation with the model</h2>
        {transcript.status === 'loading' ? <Loading what="the conversation" /> : null}
        {transcript.status === 'error' ? <ErrorBox error={transcript.error} retry={reloadTranscript} /> : null}
        {transcript.status === 'ok' ? (
          messages.length === 0 ? (
            <p class="muted">Nothing yet: the conversation is kept as the run goes.</p>
          ) : (
            <TranscriptView messages={messages} />
          )
        ) : null}
      </section>
      <h2>Events</h2>
      {live.log.length === 0 ? (
        <p class="muted">No events yet.</p>
      ) : (
        <ol class="events">
          {live.log.map((e, i) => (
            <li key={`${e.id}-${i}`}>
              <code>{e.type}</code>
            </li>
          ))}
        </ol>
      )}
      <h2>Recalled for this run</h2>
      {recalls.status === 'loading' ? <Loading what="recalls" /> : null}
      {recalls.status === 'error' ? <ErrorBox error={recalls.error} /> : null}
      {recalls.status === 'ok' ? (
        recalls.data.recalls.length === 0 ? (
          <Empty>
            <p>This run recalled nothing.</p>
          </Empty>
        ) : (
          <RecallList frames={recalls.data.recalls} />
        )
      ) : null}
    </section>
  )
}
