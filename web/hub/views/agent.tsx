import { useEffect, useRef, useState } from 'preact/hooks'
import { api, query } from '../api.js'
import {
  TOOL_MODE_CHOICES,
  type Integrations,
  type McpServer,
  type McpServers,
  type Secrets,
  type ToolMode,
  type ToolPolicies
} from '../admin-api.js'
import { AdminsOnly } from '../admin-ui.js'
import { Confirm } from './admin-kit.js'
import { isAdmin, type Identity } from '../identity.js'
import { Empty, ErrorBox, Loading, Time, useAction, useLoad } from '../ui.js'

const MODE_TEXT: Record<ToolMode, string> = {
  auto: 'Auto: runs at once',
  approve: 'Approve: waits for a person',
  deny: 'Deny: never offered to runs'
}

/** Agent settings: tool policies, MCP servers, secrets and the Slack connection. */
export function AgentSettingsView({ who }: { who: Identity }) {
  const admin = isAdmin(who)
  const [version, setVersion] = useState(0)
  const changed = () => setVersion((v) => v + 1)
  return (
    <section aria-labelledby="agent-title">
      <h1 id="agent-title">Agent settings</h1>
      <p class="lede">What the organization's agents may do: their tools, the MCP servers they reach, their secrets.</p>
      {!admin ? <AdminsOnly what="change these settings" /> : null}
      <PoliciesCard admin={admin} version={version} />
      <McpCard admin={admin} changed={changed} />
      <SecretsCard admin={admin} />
      <SlackCard />
    </section>
  )
}

function PoliciesCard({ admin, version }: { admin: boolean; version: number }) {
  const [tick, setTick] = useState(0)
  // each list is marked with the tick it was read at: a read asked for before a save (another
  // save's, still in flight) must not pass for the one after it
  const [state, reload] = useLoad(
    `policies ${version} ${tick}`,
    async () => ({ tick, ...(await api<ToolPolicies>('GET', '/tools/policies')) }),
    { keep: true }
  )
  const ticks = useRef(0)
  const [saved, setSaved] = useState<string | null>(null)
  // the choice being saved, shown until a list read after the save says what is saved (else the
  // select would show the old policy between the save and the list read again after it); `after`
  // is the tick of that read, unknown (Infinity) while the save is in flight
  const [choice, setChoice] = useState<{ tool: string; mode: ToolMode; after: number } | null>(null)
  const loaded = state.status === 'ok' ? state.data : null
  useEffect(() => {
    if (loaded && choice && loaded.tick >= choice.after) setChoice(null)
  }, [loaded])
  const shown = (p: { tool: string; mode: ToolMode }) => (choice?.tool === p.tool ? choice.mode : p.mode)
  const set = useAction(async (tool: string, mode: ToolMode) => {
    setSaved(null)
    setChoice({ tool, mode, after: Infinity })
    try {
      await api('PUT', `/tools/policies/${encodeURIComponent(tool)}`, { mode })
    } catch (err) {
      setChoice(null)
      throw err
    }
    const next = ++ticks.current
    setChoice({ tool, mode, after: next })
    setSaved(`${tool}: ${mode}`)
    setTick(next)
  })
  return (
    <div role="region" aria-labelledby="policies-title">
      <h2 id="policies-title">Tool policies</h2>
      {state.status === 'loading' ? <Loading what="tool policies" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <table class="admin-table">
          <caption>Each tool: auto (runs at once), approve (waits for a person) or deny (never offered)</caption>
          <thead>
            <tr>
              <th scope="col">Tool</th>
              <th scope="col">What it does</th>
              <th scope="col">Policy</th>
            </tr>
          </thead>
          <tbody>
            {state.data.items.map((p) => (
              <tr key={p.tool}>
                <td>
                  <code>{p.tool}</code>
                </td>
                <td>{p.description}</td>
                <td>
                  <label class="visually-hidden" for={`policy-${p.tool}`}>
                    Policy of {p.tool}
                  </label>
                  <select
                    id={`policy-${p.tool}`}
                    value={shown(p)}
                    // not disabled while a choice saves: a disabled control drops the keyboard focus
                    disabled={!admin}
                    aria-busy={set.pending}
                    onChange={(e) => {
                      const select = e.target as HTMLSelectElement
                      // one save at a time: a choice made meanwhile is put back, not silently kept unsaved
                      if (set.pending) select.value = shown(p)
                      else set.run(p.tool, select.value as ToolMode)
                    }}
                  >
                    {TOOL_MODE_CHOICES.map((m) => (
                      <option key={m} value={m}>
                        {MODE_TEXT[m]}
                      </option>
                    ))}
                  </select>
                  {p.isDefault ? <span class="muted"> (default)</span> : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {saved !== null ? (
        <p role="status" class="ok">
          Saved {saved}.
        </p>
      ) : null}
      {set.error ? <ErrorBox error={set.error} /> : null}
    </div>
  )
}

function McpCard({ admin, changed }: { admin: boolean; changed: () => void }) {
  const [version, setVersion] = useState(0)
  const again = () => {
    setVersion((v) => v + 1)
    // the servers' tools join the policies
    changed()
  }
  const [state, reload] = useLoad(`mcp ${version}`, () =>
    api<McpServers>('GET', `/mcp-servers${query({ limit: 100 })}`)
  )
  return (
    <div role="region" aria-labelledby="mcp-title">
      <h2 id="mcp-title">MCP servers</h2>
      {state.status === 'loading' ? <Loading what="MCP servers" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' && state.data.items.length === 0 ? (
        <Empty>
          <p>No MCP server is connected.</p>
        </Empty>
      ) : null}
      {state.status === 'ok' ? (
        <ul class="cards" aria-label="MCP servers">
          {state.data.items.map((s) => (
            <McpServerCard key={s.id} server={s} admin={admin} changed={again} />
          ))}
        </ul>
      ) : null}
      {admin ? <AddMcpForm added={again} /> : null}
    </div>
  )
}

function McpServerCard({ server: s, admin, changed }: { server: McpServer; admin: boolean; changed: () => void }) {
  const [confirming, setConfirming] = useState(false)
  const check = useAction(async () => {
    await api('POST', `/mcp-servers/${encodeURIComponent(s.id)}/check`)
    changed()
  })
  const remove = useAction(async () => {
    await api('DELETE', `/mcp-servers/${encodeURIComponent(s.id)}`)
    setConfirming(false)
    changed()
  })
  const titleId = `mcp-${s.id}`
  return (
    <li class="card stack" aria-labelledby={titleId}>
      <h3 id={titleId}>
        {s.name}{' '}
        <span class={`badge ${s.ready ? 'status-succeeded' : 'status-failed'}`}>{s.ready ? 'ready' : 'not ready'}</span>
      </h3>
      <p class="meta">
        <code>{s.url}</code> · last checked <Time iso={s.lastCheckedAt} />
        {s.headerNames.length > 0 ? <> · headers (sealed): {s.headerNames.join(', ')}</> : null}
      </p>
      {s.lastError !== null ? (
        <p class="notice">
          <strong>Not ready:</strong> {s.lastError}
        </p>
      ) : null}
      {s.tools.length > 0 ? (
        <ul aria-label={`Tools of ${s.name}`}>
          {s.tools.map((tool) => (
            <li key={tool.name}>
              <code>
                mcp__{s.name}__{tool.name}
              </code>
              {tool.description ? <span class="muted"> {tool.description}</span> : null}
            </li>
          ))}
        </ul>
      ) : (
        <p class="muted">No tools listed.</p>
      )}
      {s.warnings.length > 0 ? (
        <ul class="notice" aria-label={`Warnings of ${s.name}`}>
          {s.warnings.map((w, i) => (
            <li key={i}>{w}</li>
          ))}
        </ul>
      ) : null}
      {admin ? (
        <div class="row">
          <button type="button" class="secondary" disabled={check.pending} onClick={() => check.run()}>
            {check.pending ? 'Checking…' : `Check ${s.name}`}
          </button>
          <button type="button" class="danger" onClick={() => setConfirming(true)}>
            Remove {s.name}
          </button>
        </div>
      ) : null}
      {check.error ? <ErrorBox error={check.error} /> : null}
      <Confirm
        open={confirming}
        title={`Remove the MCP server ${s.name}?`}
        action={`Remove ${s.name}`}
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setConfirming(false)}
      >
        <p>Its tools are no longer offered to runs and its sealed headers are deleted.</p>
      </Confirm>
    </li>
  )
}

function AddMcpForm({ added }: { added: () => void }) {
  const [name, setName] = useState('')
  const [url, setUrl] = useState('')
  const [headers, setHeaders] = useState<Array<{ name: string; value: string }>>([])
  const [done, setDone] = useState<string | null>(null)
  const add = useAction(async () => {
    const sent: Record<string, string> = {}
    for (const h of headers) if (h.name.trim() !== '') sent[h.name.trim()] = h.value
    await api('POST', '/mcp-servers', {
      name: name.trim(),
      url: url.trim(),
      ...(Object.keys(sent).length > 0 ? { headers: sent } : {})
    })
    setDone(name.trim())
    setName('')
    setUrl('')
    setHeaders([])
    added()
  })
  const setHeader = (i: number, change: Partial<{ name: string; value: string }>) =>
    setHeaders((hs) => hs.map((h, j) => (j === i ? { ...h, ...change } : h)))
  return (
    <form
      class="card stack"
      aria-labelledby="add-mcp-title"
      onSubmit={(e) => {
        e.preventDefault()
        setDone(null)
        add.run()
      }}
    >
      <h3 id="add-mcp-title">Add an MCP server</h3>
      <label for="mcp-name">Name (a-z, 0-9, _ and -; its tools are named mcp__name__tool)</label>
      <input
        id="mcp-name"
        required
        maxLength={32}
        value={name}
        onInput={(e) => setName((e.target as HTMLInputElement).value)}
      />
      <label for="mcp-url">URL (Streamable HTTP)</label>
      <input
        id="mcp-url"
        type="url"
        required
        value={url}
        onInput={(e) => setUrl((e.target as HTMLInputElement).value)}
      />
      {headers.map((h, i) => (
        <fieldset key={i} class="row">
          <legend>Header {i + 1} (its value is sealed)</legend>
          <label for={`mcp-header-name-${i}`}>Header name</label>
          <input
            id={`mcp-header-name-${i}`}
            value={h.name}
            onInput={(e) => setHeader(i, { name: (e.target as HTMLInputElement).value })}
          />
          <label for={`mcp-header-value-${i}`}>Header value</label>
          <input
            id={`mcp-header-value-${i}`}
            type="password"
            autoComplete="off"
            value={h.value}
            onInput={(e) => setHeader(i, { value: (e.target as HTMLInputElement).value })}
          />
          <button type="button" class="secondary" onClick={() => setHeaders((hs) => hs.filter((_, j) => j !== i))}>
            Drop header {i + 1}
          </button>
        </fieldset>
      ))}
      <button type="button" class="secondary" onClick={() => setHeaders((hs) => [...hs, { name: '', value: '' }])}>
        Add a header
      </button>
      <button type="submit" disabled={add.pending}>
        {add.pending ? 'Adding…' : 'Add MCP server'}
      </button>
      {done !== null ? <p role="status">Added {done}.</p> : null}
      {add.error ? <ErrorBox error={add.error} /> : null}
    </form>
  )
}

function SecretsCard({ admin }: { admin: boolean }) {
  const [version, setVersion] = useState(0)
  const [state, reload] = useLoad(`secrets ${version}`, () => api<Secrets>('GET', `/secrets${query({ limit: 100 })}`))
  const [name, setName] = useState('')
  const [value, setValue] = useState('')
  const [removing, setRemoving] = useState<string | null>(null)
  const [done, setDone] = useState<string | null>(null)
  const save = useAction(async () => {
    await api('PUT', `/secrets/${encodeURIComponent(name.trim())}`, { value })
    setDone(name.trim())
    setName('')
    setValue('')
    setVersion((v) => v + 1)
  })
  const remove = useAction(async () => {
    await api('DELETE', `/secrets/${encodeURIComponent(removing!)}`)
    setRemoving(null)
    setVersion((v) => v + 1)
  })
  return (
    <div role="region" aria-labelledby="secrets-title">
      <h2 id="secrets-title">Secrets</h2>
      <p class="muted">
        A run given a secret's name gets its value as an environment variable; values are never shown.
      </p>
      {state.status === 'loading' ? <Loading what="secrets" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' && state.data.items.length === 0 ? (
        <Empty>
          <p>No secret is kept.</p>
        </Empty>
      ) : null}
      {state.status === 'ok' && state.data.items.length > 0 ? (
        <ul class="cards" aria-label="Secrets">
          {state.data.items.map((s) => (
            <li key={s.name} class="card row">
              <code>{s.name}</code>
              <span class="muted">
                set <Time iso={s.updatedAt} />, last used <Time iso={s.lastUsedAt} />
              </span>
              {admin ? (
                <button type="button" class="danger" onClick={() => setRemoving(s.name)}>
                  Delete {s.name}
                </button>
              ) : null}
            </li>
          ))}
        </ul>
      ) : null}
      {admin ? (
        <form
          class="card stack"
          aria-labelledby="secret-form-title"
          onSubmit={(e) => {
            e.preventDefault()
            setDone(null)
            save.run()
          }}
        >
          <h3 id="secret-form-title">Set a secret</h3>
          <label for="secret-name">Name (upper case, digits and _)</label>
          <input
            id="secret-name"
            required
            maxLength={128}
            value={name}
            onInput={(e) => setName((e.target as HTMLInputElement).value)}
          />
          <label for="secret-value">Value</label>
          <input
            id="secret-value"
            type="password"
            autoComplete="off"
            required
            value={value}
            onInput={(e) => setValue((e.target as HTMLInputElement).value)}
          />
          <button type="submit" disabled={save.pending}>
            {save.pending ? 'Saving…' : 'Save secret'}
          </button>
          {done !== null ? <p role="status">Saved {done}: its value is sealed and not shown again.</p> : null}
          {save.error ? <ErrorBox error={save.error} /> : null}
        </form>
      ) : null}
      <Confirm
        open={removing !== null}
        title={`Delete the secret ${removing ?? ''}?`}
        action="Delete"
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setRemoving(null)}
      >
        <p>Runs that name it can no longer start.</p>
      </Confirm>
    </div>
  )
}

function SlackCard() {
  const [state, reload] = useLoad('integrations', () => api<Integrations>('GET', '/integrations'))
  const slack = state.status === 'ok' ? state.data.items.find((i) => i.kind === 'slack') : undefined
  return (
    <div role="region" aria-labelledby="slack-title">
      <h2 id="slack-title">Slack</h2>
      {state.status === 'loading' ? <Loading what="the Slack connection" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <div class="card">
          {slack?.connected ? (
            <p>
              <span class="badge status-succeeded">connected</span> as {slack.account ?? 'a Slack workspace'} since{' '}
              <Time iso={slack.connectedAt} />
            </p>
          ) : (
            <p>
              <span class="badge">not connected</span> Connect a Slack app with <code>PUT /api/integrations/slack</code>{' '}
              (see the Slack guide).
            </p>
          )}
          {slack?.lastError ? (
            <p class="notice">
              <strong>Last failure:</strong> {slack.lastError}
            </p>
          ) : null}
        </div>
      ) : null}
    </div>
  )
}
