import { useEffect, useState } from 'preact/hooks'
import { api } from '../api.js'
import type { ApiKey, ApiKeys, Members, MintedKey } from '../admin-api.js'
import { AdminsOnly, ShownOnce } from '../admin-ui.js'
import { Confirm, Refused } from './admin-kit.js'
import { isAdmin, type Identity } from '../identity.js'
import { Empty, ErrorBox, Link, Loading, Time, useAction, useLoad } from '../ui.js'

/** Access: the org's API keys (mint, shown once; revoke) and its members with their roles (changed, removed). */
export function AccessView({ who, changed }: { who: Identity; changed: () => void }) {
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
      {who.kind === 'user' && who.org ? (
        <MembersCard orgId={who.org.id} admin={admin} selfId={who.session.user.id} selfChanged={changed} />
      ) : null}
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

type Member = Members['items'][number]
type Role = Member['role']
const ROLES: Role[] = ['owner', 'admin', 'member']
const RANK: Record<Role, number> = { owner: 3, admin: 2, member: 1 }

/** A role change or a removal waiting for its question to be answered. */
type Pending = { kind: 'role'; member: Member; role: Role } | { kind: 'remove'; member: Member }

/**
 * The members and their roles. An owner or admin changes a role (a lower one asks first) and
 * removes a member (asks first); a refusal (the last owner, an admin touching an owner) says why
 * where it was asked. A change to one's own membership reloads who the console acts as.
 */
function MembersCard({
  orgId,
  admin,
  selfId,
  selfChanged
}: {
  orgId: string
  admin: boolean
  selfId: string
  selfChanged: () => void
}) {
  const [version, setVersion] = useState(0)
  const [state, reload] = useLoad(
    `members ${orgId} ${version}`,
    () => api<Members>('GET', `/auth/organizations/${encodeURIComponent(orgId)}/members`),
    { keep: version > 0 }
  )
  // the role each row's picker shows before it is saved, and after, until the list read again
  // after the save has it (else the picker would show the old role in between)
  const [chosen, setChosen] = useState<Record<string, Role>>({})
  const loaded = state.status === 'ok' ? state.data : null
  useEffect(() => {
    if (!loaded) return
    const roles = new Map(loaded.items.map((m) => [m.userId, m.role]))
    setChosen((c) => {
      const left = Object.entries(c).filter(([userId, role]) => roles.has(userId) && roles.get(userId) !== role)
      return left.length === Object.keys(c).length ? c : Object.fromEntries(left)
    })
  }, [loaded])
  const [asking, setAsking] = useState<Pending | null>(null)
  const [done, setDone] = useState<string | null>(null)
  const memberUrl = (userId: string) =>
    `/auth/organizations/${encodeURIComponent(orgId)}/members/${encodeURIComponent(userId)}`
  const after = (m: Member, text: string) => {
    setAsking(null)
    setDone(text)
    if (m.userId === selfId) selfChanged()
    else setVersion((v) => v + 1)
  }
  const change = useAction(async (m: Member, role: Role) => {
    setDone(null)
    await api('PATCH', memberUrl(m.userId), { role })
    after(m, `${m.name} is now ${role === 'admin' ? 'an' : 'a'} ${role}.`)
  })
  const remove = useAction(async (m: Member) => {
    setDone(null)
    await api('DELETE', memberUrl(m.userId))
    after(m, `${m.name} is no longer a member.`)
  })
  const save = (m: Member) => {
    const role = chosen[m.userId] ?? m.role
    if (role === m.role) return
    // a lower role takes something away: it asks first; a higher one is given at once
    if (RANK[role] < RANK[m.role]) setAsking({ kind: 'role', member: m, role })
    else change.run(m, role)
  }
  const confirming = asking?.kind === 'role' ? change : remove
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
              {admin ? (
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              ) : null}
            </tr>
          </thead>
          <tbody>
            {state.data.items.map((m) => {
              const role = chosen[m.userId] ?? m.role
              const pickerId = `member-role-${m.userId}`
              return (
                <tr key={m.userId}>
                  <td>{m.name}</td>
                  <td>{m.email}</td>
                  <td>
                    {admin ? (
                      <form
                        class="row"
                        onSubmit={(e) => {
                          e.preventDefault()
                          save(m)
                        }}
                      >
                        <label for={pickerId} class="visually-hidden">
                          Role of {m.name}
                        </label>
                        <select
                          id={pickerId}
                          value={role}
                          onChange={(e) =>
                            setChosen((c) => ({ ...c, [m.userId]: (e.target as HTMLSelectElement).value as Role }))
                          }
                        >
                          {ROLES.map((r) => (
                            <option key={r} value={r}>
                              {r}
                            </option>
                          ))}
                        </select>
                        <button type="submit" class="secondary" disabled={role === m.role || change.pending}>
                          Save role of {m.name}
                        </button>
                      </form>
                    ) : (
                      m.role
                    )}
                  </td>
                  <td>
                    <Time iso={m.createdAt} />
                  </td>
                  {admin ? (
                    <td>
                      <button type="button" class="danger" onClick={() => setAsking({ kind: 'remove', member: m })}>
                        Remove {m.name}
                      </button>
                    </td>
                  ) : null}
                </tr>
              )
            })}
          </tbody>
        </table>
      ) : null}
      {done !== null ? <p role="status">{done}</p> : null}
      {/* a role given at once is refused here; what was asked first is refused in its question */}
      {change.error && asking === null ? <Refused error={change.error} /> : null}
      {admin ? (
        <p>
          <Link to="/organization">Add a member</Link>
        </p>
      ) : null}
      <Confirm
        open={asking !== null}
        id="member-confirm-title"
        title={
          asking?.kind === 'role'
            ? `Make ${asking.member.name} ${asking.role === 'admin' ? 'an' : 'a'} ${asking.role}?`
            : `Remove ${asking?.member.name ?? ''} from the organization?`
        }
        action={asking?.kind === 'role' ? `Make ${asking.role}` : `Remove ${asking?.member.name ?? ''}`}
        pending={confirming.pending}
        error={confirming.error}
        onConfirm={() => {
          if (asking?.kind === 'role') change.run(asking.member, asking.role)
          else if (asking) remove.run(asking.member)
        }}
        onCancel={() => {
          // the picker goes back to the role the member has
          if (asking) setChosen(({ [asking.member.userId]: _asked, ...rest }) => rest)
          setAsking(null)
        }}
      >
        {asking?.kind === 'role' ? (
          <p>
            {asking.member.name} is {asking.member.role === 'admin' ? 'an' : 'a'} {asking.member.role} now
            {asking.member.userId === selfId ? ': this is you, and you may lose what you can change here' : ''}.
          </p>
        ) : (
          <p>
            {asking?.member.userId === selfId ? 'This is you: ' : ''}
            They lose access to the organization at their next request; their past runs and memory stay.
          </p>
        )}
      </Confirm>
    </div>
  )
}
