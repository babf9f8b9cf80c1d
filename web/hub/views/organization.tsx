import { useState } from 'preact/hooks'
import { api, ApiError } from '../api.js'
import { isAdmin, type Identity } from '../identity.js'
import { ErrorBox, useAction } from '../ui.js'

/** Creating an organization: the first step of a person who has none, and later another one. */
export function CreateOrgForm({ created, first }: { created: () => void; first: boolean }) {
  const [name, setName] = useState('')
  const create = useAction(async () => {
    await api('POST', '/auth/organizations', { name: name.trim() })
    setName('')
    created()
  })
  return (
    <form
      class="card stack"
      onSubmit={(e) => {
        e.preventDefault()
        if (name.trim() !== '') create.run()
      }}
      aria-labelledby="create-org-title"
    >
      <h2 id="create-org-title">{first ? 'Create your organization' : 'Create another organization'}</h2>
      <label for="org-name">Organization name</label>
      <input
        id="org-name"
        required
        maxLength={100}
        value={name}
        onInput={(e) => setName((e.target as HTMLInputElement).value)}
      />
      <button type="submit" disabled={create.pending || name.trim() === ''}>
        {create.pending ? 'Creating…' : 'Create organization'}
      </button>
      {create.error ? <ErrorBox error={create.error} /> : null}
    </form>
  )
}

/** A signed-in person without an organization starts here: everything else needs one. */
export function NoOrgView({ created }: { created: () => void }) {
  return (
    <section aria-labelledby="no-org-title" class="narrow">
      <h1 id="no-org-title">Welcome to Cairn</h1>
      <p class="lede">
        Memory, runs and everything else belong to an organization. Create one for your team (you will be its owner and
        can add people), or ask someone to add you to theirs.
      </p>
      <CreateOrgForm first created={created} />
    </section>
  )
}

/** The active organization: add a member by email (owners and admins), create another organization. */
export function OrganizationView({ who, changed }: { who: Identity; changed: () => void }) {
  const [email, setEmail] = useState('')
  const [role, setRole] = useState<'member' | 'admin'>('member')
  const [added, setAdded] = useState<string | null>(null)
  const org = who.kind === 'user' ? who.org : null
  const add = useAction(async () => {
    await api('POST', `/auth/organizations/${encodeURIComponent(org!.id)}/members`, { email: email.trim(), role })
    setAdded(email.trim())
    setEmail('')
  })
  if (who.kind !== 'user' || !org) {
    return (
      <section aria-labelledby="org-title">
        <h1 id="org-title">Organization</h1>
        <p>This is the dev organization of this machine: sign in to manage an organization of your own.</p>
      </section>
    )
  }
  const notFound = add.error instanceof ApiError && add.error.status === 404
  return (
    <section aria-labelledby="org-title">
      <h1 id="org-title">{org.name}</h1>
      <p class="muted">You are its {org.role}.</p>
      {isAdmin(who) ? (
        <form
          class="card stack"
          onSubmit={(e) => {
            e.preventDefault()
            setAdded(null)
            if (email.trim() !== '') add.run()
          }}
          aria-labelledby="add-member-title"
        >
          <h2 id="add-member-title">Add a member</h2>
          <label for="member-email">Email of a person who has an account</label>
          <input
            id="member-email"
            type="email"
            required
            value={email}
            onInput={(e) => setEmail((e.target as HTMLInputElement).value)}
          />
          <label for="member-role">Role</label>
          <select
            id="member-role"
            value={role}
            onChange={(e) => setRole((e.target as HTMLSelectElement).value as 'member' | 'admin')}
          >
            <option value="member">Member</option>
            <option value="admin">Admin</option>
          </select>
          <button type="submit" disabled={add.pending || email.trim() === ''}>
            {add.pending ? 'Adding…' : 'Add member'}
          </button>
          {added !== null ? (
            <p role="status">
              Added {added} to {org.name}.
            </p>
          ) : null}
          {notFound ? (
            <p class="state notice" role="alert">
              Nobody has an account with that email yet: they can create one, then you add them.
            </p>
          ) : add.error ? (
            <ErrorBox error={add.error} />
          ) : null}
        </form>
      ) : (
        <p class="notice">Only owners and admins can add members.</p>
      )}
      <CreateOrgForm first={false} created={changed} />
    </section>
  )
}
