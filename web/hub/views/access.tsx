import { useState } from 'preact/hooks'
import { api } from '../api.js'
import type { ApiKey, ApiKeys, Members, MintedKey } from '../admin-api.js'
import { AdminsOnly, Confirm, ShownOnce } from '../admin-ui.js'
import { isAdmin, type Identity } from '../identity.js'
import { Empty, ErrorBox, Link, Loading, Time, useAction, useLoad } from '../ui.js'

/** Access: the org's API keys (mint, shown once; revoke) and its members with their roles. */
export function AccessView({ who }: { who: Identity }) {
  const admin = isAdmin(who)
  return (
    <section aria-labelledby="access-title">
      <h1 id="access-title">Access</h1>
      <p class="lede">Who and what may act in this organization: its members, and the API keys of its integrations.</p>
      {who.kind === 'user' && admin ? (
        <KeysCard />
      ) : who.kind === 'user' ? (
        <AdminsOnly what="see and mint API keys" />
      ) : (
        <p class="notice">
          API keys are minted by a signed-in owner or admin: <Link to="/sign-in">sign in</Link> to manage them.
        </p>
      )}
      {who.kind === 'user' && who.org ? <MembersCard orgId={who.org.id} admin={admin} /> : null}
    </section>
  )
}

function KeysCard() {
  const [version, setVersion] = useState(0)
  const [state, reload] = useLoad(`keys ${version}`, () => api<ApiKeys>('GET', '/keys'))
  const [name, setName] = useState('')
  const [minted, setMinted] = useState<MintedKey | null>(null)
  const [revoking, setRevoking] = useState<ApiKey | null>(null)
  const mint = useAction(async () => {
    const key = await api<MintedKey>('POST', '/keys', { name: name.trim() })
    setMinted(key)
    setName('')
    setVersion((v) => v + 1)
  })
  const revoke = useAction(async () => {
    await api('DELETE', `/keys/${encodeURIComponent(revoking!.id)}`)
    setRevoking(null)
    setVersion((v) => v + 1)
  })
  const live = state.status === 'ok' ? state.data.items.filter((k) => k.revokedAt === null) : []
  const revoked = state.status === 'ok' ? state.data.items.filter((k) => k.revokedAt !== null) : []
  return (
    <div role="region" aria-labelledby="keys-title">
      <h2 id="keys-title">API keys</h2>
      <form
        class="card stack"
        aria-labelledby="mint-title"
        onSubmit={(e) => {
          e.preventDefault()
          if (name.trim() !== '') mint.run()
        }}
      >
        <h3 id="mint-title">Mint a key</h3>
        <label for="key-name">What it is for</label>
        <input
          id="key-name"
          required
          maxLength={100}
          value={name}
          onInput={(e) => setName((e.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={mint.pending || name.trim() === ''}>
          {mint.pending ? 'Minting…' : 'Mint key'}
        </button>
        {mint.error ? <ErrorBox error={mint.error} /> : null}
      </form>
      {minted ? <ShownOnce label={`The key ${minted.name}:`} value={minted.key} /> : null}
      {state.status === 'loading' ? <Loading what="keys" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' && live.length === 0 ? (
        <Empty>
          <p>No API key is in use.</p>
        </Empty>
      ) : null}
      {live.length > 0 ? (
        <table class="admin-table">
          <caption>Keys in use</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Ends with</th>
              <th scope="col">Created</th>
              <th scope="col">Last used</th>
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {live.map((k) => (
              <tr key={k.id}>
                <td>{k.name}</td>
                <td>
                  <code>…{k.last4}</code>
                </td>
                <td>
                  <Time iso={k.createdAt} />
                </td>
                <td>
                  <Time iso={k.lastUsedAt} />
                </td>
                <td>
                  <button type="button" class="danger" onClick={() => setRevoking(k)}>
                    Revoke {k.name}
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {revoked.length > 0 ? (
        <details>
          <summary>Revoked keys ({revoked.length})</summary>
          <ul>
            {revoked.map((k) => (
              <li key={k.id}>
                {k.name} (…{k.last4}), revoked <Time iso={k.revokedAt} />
              </li>
            ))}
          </ul>
        </details>
      ) : null}
      <Confirm
        open={revoking !== null}
        title={`Revoke the key ${revoking?.name ?? ''}?`}
        action="Revoke"
        pending={revoke.pending}
        error={revoke.error}
        onConfirm={() => revoke.run()}
        onCancel={() => setRevoking(null)}
      >
        <p>Every request made with it is refused from now on. This cannot be undone.</p>
      </Confirm>
    </div>
  )
}

function MembersCard({ orgId, admin }: { orgId: string; admin: boolean }) {
  const [state, reload] = useLoad(`members ${orgId}`, () =>
    api<Members>('GET', `/auth/organizations/${encodeURIComponent(orgId)}/members`)
  )
  return (
    <div role="region" aria-labelledby="members-title">
      <h2 id="members-title">Members</h2>
      {state.status === 'loading' ? <Loading what="members" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <table class="admin-table">
          <caption>Members and their roles</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Email</th>
              <th scope="col">Role</th>
              <th scope="col">Since</th>
            </tr>
          </thead>
          <tbody>
            {state.data.items.map((m) => (
              <tr key={m.userId}>
                <td>{m.name}</td>
                <td>{m.email}</td>
                <td>{m.role}</td>
                <td>
                  <Time iso={m.createdAt} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {admin ? (
        <p>
          <Link to="/organization">Add a member</Link>
        </p>
      ) : null}
    </div>
  )
}
