import { useState } from 'preact/hooks'
import { api, query, type Models } from '../api.js'
import {
  chatOnce,
  type DefaultModel,
  type EmbeddingModel,
  type Provider,
  type ProviderReply,
  type Providers
} from '../admin-api.js'
import { AdminsOnly } from '../admin-ui.js'
import { Confirm } from './admin-kit.js'
import { isAdmin, type Identity } from '../identity.js'
import { Empty, ErrorBox, Loading, Time, useAction, useLoad } from '../ui.js'

const KINDS = [
  { value: 'openai', label: 'OpenAI-compatible (chat completions, base URL ending in /v1)' },
  { value: 'anthropic', label: 'Anthropic (Messages API, base URL without /v1)' }
] as const

/** Models: the org's providers (connect, check, test, remove) and its default and embedding models. */
export function ModelsView({ who }: { who: Identity }) {
  const admin = isAdmin(who)
  const [version, setVersion] = useState(0)
  const changed = () => setVersion((v) => v + 1)
  const [providers, reloadProviders] = useLoad(`providers ${version}`, () =>
    api<Providers>('GET', `/providers${query({ limit: 100 })}`)
  )
  return (
    <section aria-labelledby="models-title">
      <h1 id="models-title">Models</h1>
      <p class="lede">
        The models this organization's runs, chats and automations use: the ones the server offers and those of the
        providers you connect.
      </p>
      <DefaultModelCard admin={admin} version={version} changed={changed} />
      <EmbeddingCard admin={admin} version={version} changed={changed} />
      <h2>Providers</h2>
      {providers.status === 'loading' ? <Loading what="providers" /> : null}
      {providers.status === 'error' ? <ErrorBox error={providers.error} retry={reloadProviders} /> : null}
      {providers.status === 'ok' && providers.data.items.length === 0 ? (
        <Empty>
          <p>No provider is connected yet.</p>
        </Empty>
      ) : null}
      {providers.status === 'ok' ? (
        <ul class="cards" aria-label="Providers">
          {providers.data.items.map((p) => (
            <ProviderCard key={p.id} provider={p} admin={admin} changed={changed} />
          ))}
        </ul>
      ) : null}
      {admin ? <ConnectForm connected={changed} /> : <AdminsOnly what="connect or remove providers" />}
    </section>
  )
}

function DefaultModelCard({ admin, version, changed }: { admin: boolean; version: number; changed: () => void }) {
  const [state, reload] = useLoad(`default model ${version}`, async () => {
    const [current, models] = await Promise.all([
      api<DefaultModel>('GET', '/models/default'),
      api<Models>('GET', '/models')
    ])
    return { current, models: models.items }
  })
  const [choice, setChoice] = useState<string | null>(null)
  const [saved, setSaved] = useState(false)
  const save = useAction(async (model: string | null) => {
    await api('PUT', '/models/default', { model })
    setChoice(null)
    setSaved(true)
    changed()
  })
  return (
    <div class="card stack" role="region" aria-labelledby="default-model-title">
      <h2 id="default-model-title">Default model</h2>
      {state.status === 'loading' ? <Loading what="the default model" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <>
          <p>
            Runs that name no model use <strong class="current-default">{state.data.current.model}</strong>{' '}
            <span class="muted">({SOURCE[state.data.current.source]})</span>.
          </p>
          {admin ? (
            <form
              class="row"
              onSubmit={(e) => {
                e.preventDefault()
                setSaved(false)
                save.run(choice ?? state.data.current.model)
              }}
            >
              <label for="default-model">Default model</label>
              <select
                id="default-model"
                value={choice ?? state.data.current.model}
                onChange={(e) => setChoice((e.target as HTMLSelectElement).value)}
              >
                {state.data.models.some((m) => m.id === state.data.current.model) ? null : (
                  <option value={state.data.current.model}>{state.data.current.model}</option>
                )}
                {state.data.models.map((m) => (
                  <option key={`${m.engine}/${m.id}`} value={m.id}>
                    {m.id}
                  </option>
                ))}
              </select>
              <button type="submit" disabled={save.pending}>
                Save default
              </button>
              {state.data.current.source === 'org' ? (
                <button type="button" class="secondary" disabled={save.pending} onClick={() => save.run(null)}>
                  Forget the choice
                </button>
              ) : null}
              {saved ? (
                <span role="status" class="ok">
                  Saved.
                </span>
              ) : null}
            </form>
          ) : null}
          {save.error ? <ErrorBox error={save.error} /> : null}
        </>
      ) : null}
    </div>
  )
}

const SOURCE: Record<DefaultModel['source'], string> = {
  org: 'chosen by an admin',
  deployment: "the server's first model",
  provider: "the first model of the organization's providers",
  echo: 'no model is configured: the echo engine repeats the prompt'
}

const EMBEDDING_SOURCE: Record<EmbeddingModel['source'], string> = {
  org: 'chosen by an admin',
  deployment: "the server's",
  builtin: 'the built-in offline embedder'
}

function EmbeddingCard({ admin, version, changed }: { admin: boolean; version: number; changed: () => void }) {
  const [state, reload] = useLoad(`embedding ${version}`, () => api<EmbeddingModel>('GET', '/models/embedding'))
  const [draft, setDraft] = useState<string | null>(null)
  const [saved, setSaved] = useState(false)
  const save = useAction(async (model: string | null) => {
    await api('PUT', '/models/embedding', { model })
    setDraft(null)
    setSaved(true)
    changed()
  })
  return (
    <div class="card stack" role="region" aria-labelledby="embedding-title">
      <h2 id="embedding-title">Embedding model</h2>
      <p class="muted">
        Memory and knowledge are found by meaning with it. Changing it embeds every text again in the background.
      </p>
      {state.status === 'loading' ? <Loading what="the embedding model" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <>
          <p>
            Now: <strong>{state.data.model}</strong> <span class="muted">({EMBEDDING_SOURCE[state.data.source]})</span>
            {state.data.dimensions !== null ? <span class="muted">, {state.data.dimensions} dimensions</span> : null}
          </p>
          {admin ? (
            <form
              class="row"
              onSubmit={(e) => {
                e.preventDefault()
                setSaved(false)
                const model = (draft ?? state.data.model).trim()
                if (model !== '') save.run(model)
              }}
            >
              <label for="embedding-model">Embedding model</label>
              <input
                id="embedding-model"
                maxLength={200}
                value={draft ?? state.data.model}
                onInput={(e) => setDraft((e.target as HTMLInputElement).value)}
              />
              <button type="submit" disabled={save.pending}>
                Save embedding model
              </button>
              {state.data.source === 'org' ? (
                <button type="button" class="secondary" disabled={save.pending} onClick={() => save.run(null)}>
                  Use the server's
                </button>
              ) : null}
              {saved ? (
                <span role="status" class="ok">
                  Saved.
                </span>
              ) : null}
            </form>
          ) : null}
          {save.error ? <ErrorBox error={save.error} /> : null}
        </>
      ) : null}
    </div>
  )
}

function ProviderCard({ provider: p, admin, changed }: { provider: Provider; admin: boolean; changed: () => void }) {
  const [confirming, setConfirming] = useState(false)
  const [model, setModel] = useState(p.models[0] ?? '')
  const [message, setMessage] = useState('Say hello in five words.')
  const [answer, setAnswer] = useState<string | null>(null)
  const check = useAction(async () => {
    await api<ProviderReply>('POST', `/providers/${encodeURIComponent(p.id)}/check`)
    changed()
  })
  const test = useAction(async () => {
    setAnswer(null)
    setAnswer(await chatOnce(model, message.trim()))
  })
  const makeDefault = useAction(async () => {
    await api('PUT', '/models/default', { model })
    changed()
  })
  const remove = useAction(async () => {
    await api('DELETE', `/providers/${encodeURIComponent(p.id)}`)
    setConfirming(false)
    changed()
  })
  const titleId = `provider-${p.id}`
  return (
    <li class="card stack" aria-labelledby={titleId}>
      <h3 id={titleId}>
        {p.name} <span class="muted">({p.kind})</span>{' '}
        <span class={`badge ${p.ready ? 'status-succeeded' : 'status-failed'}`}>{p.ready ? 'ready' : 'not ready'}</span>
      </h3>
      <p class="meta">
        <code>{p.baseUrl}</code> · last checked <Time iso={p.lastCheckedAt} />
      </p>
      {p.lastError !== null ? (
        <p class="notice">
          <strong>Not ready:</strong> {p.lastError}
        </p>
      ) : null}
      <p>Models: {p.models.length === 0 ? <span class="muted">none listed yet</span> : p.models.join(', ')}</p>
      {admin ? (
        <div class="row">
          <button type="button" class="secondary" disabled={check.pending} onClick={() => check.run()}>
            {check.pending ? 'Checking…' : `Check ${p.name}`}
          </button>
          <button type="button" class="danger" onClick={() => setConfirming(true)}>
            Remove {p.name}
          </button>
        </div>
      ) : null}
      {check.error ? <ErrorBox error={check.error} /> : null}
      {p.models.length > 0 ? (
        <form
          class="stack"
          aria-label={`Test ${p.name}`}
          onSubmit={(e) => {
            e.preventDefault()
            if (message.trim() !== '' && model !== '') test.run()
          }}
        >
          <label for={`${titleId}-model`}>Model of {p.name}</label>
          <select
            id={`${titleId}-model`}
            value={model}
            onChange={(e) => setModel((e.target as HTMLSelectElement).value)}
          >
            {p.models.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
          <label for={`${titleId}-message`}>Test message</label>
          <input
            id={`${titleId}-message`}
            maxLength={2000}
            value={message}
            onInput={(e) => setMessage((e.target as HTMLInputElement).value)}
          />
          <div class="row">
            <button type="submit" disabled={test.pending || message.trim() === ''}>
              {test.pending ? 'Waiting for the answer…' : `Test ${p.name}`}
            </button>
            {admin ? (
              <button type="button" class="secondary" disabled={makeDefault.pending} onClick={() => makeDefault.run()}>
                Make {model} the default
              </button>
            ) : null}
          </div>
          {answer !== null ? (
            <p role="status" class="test-answer">
              <strong>{model} answered:</strong> <span class="content">{answer}</span>
            </p>
          ) : null}
          {test.error ? <ErrorBox error={test.error} /> : null}
          {makeDefault.error ? <ErrorBox error={makeDefault.error} /> : null}
        </form>
      ) : null}
      <Confirm
        open={confirming}
        title={`Remove the provider ${p.name}?`}
        action={`Remove ${p.name}`}
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setConfirming(false)}
      >
        <p>Its key is deleted and its models are no longer offered: runs that name them will fail.</p>
      </Confirm>
    </li>
  )
}

function ConnectForm({ connected }: { connected: () => void }) {
  const [name, setName] = useState('')
  const [kind, setKind] = useState<'openai' | 'anthropic'>('openai')
  const [baseUrl, setBaseUrl] = useState('')
  const [apiKey, setApiKey] = useState('')
  const [models, setModels] = useState('')
  const [done, setDone] = useState<string | null>(null)
  const connect = useAction(async () => {
    const listed = models
      .split(',')
      .map((m) => m.trim())
      .filter((m) => m !== '')
    const { provider } = await api<ProviderReply>('POST', '/providers', {
      name: name.trim(),
      kind,
      baseUrl: baseUrl.trim(),
      apiKey,
      ...(listed.length > 0 ? { models: listed } : {})
    })
    // the key is sealed on the server: it leaves this page too
    setApiKey('')
    setName('')
    setBaseUrl('')
    setModels('')
    setDone(provider.name)
    connected()
  })
  return (
    <form
      class="card stack"
      aria-labelledby="connect-title"
      onSubmit={(e) => {
        e.preventDefault()
        setDone(null)
        connect.run()
      }}
    >
      <h2 id="connect-title">Connect a provider</h2>
      <label for="provider-name">Name</label>
      <input
        id="provider-name"
        required
        maxLength={100}
        value={name}
        onInput={(e) => setName((e.target as HTMLInputElement).value)}
      />
      <label for="provider-kind">Kind</label>
      <select
        id="provider-kind"
        value={kind}
        onChange={(e) => setKind((e.target as HTMLSelectElement).value as 'openai' | 'anthropic')}
      >
        {KINDS.map((k) => (
          <option key={k.value} value={k.value}>
            {k.label}
          </option>
        ))}
      </select>
      <label for="provider-url">Base URL</label>
      <input
        id="provider-url"
        type="url"
        required
        placeholder={kind === 'openai' ? 'https://api.example.com/v1' : 'https://api.anthropic.com'}
        value={baseUrl}
        onInput={(e) => setBaseUrl((e.target as HTMLInputElement).value)}
      />
      <label for="provider-key">API key</label>
      <input
        id="provider-key"
        type="password"
        autoComplete="off"
        required
        value={apiKey}
        onInput={(e) => setApiKey((e.target as HTMLInputElement).value)}
      />
      <p class="muted">The key is sealed on the server and never shown again, to anyone.</p>
      <label for="provider-models">Models (optional, separated by commas; empty: the ones the provider lists)</label>
      <input id="provider-models" value={models} onInput={(e) => setModels((e.target as HTMLInputElement).value)} />
      <button type="submit" disabled={connect.pending}>
        {connect.pending ? 'Connecting…' : 'Connect provider'}
      </button>
      {done !== null ? <p role="status">Connected {done}.</p> : null}
      {connect.error ? <ErrorBox error={connect.error} /> : null}
    </form>
  )
}
