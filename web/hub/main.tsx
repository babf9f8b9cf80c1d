import { render } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import { api, onReleaseMismatch } from './api.js'
import { loadIdentity, type Identity } from './identity.js'
import { match, navigate, useLocation } from './router.js'
import { ErrorBox, Link, Loading, messageOf, useAction, useLoad } from './ui.js'
import { BrowseView } from './views/browse.js'
import { CapturesView } from './views/captures.js'
import { ItemView } from './views/item.js'
import { RecallsView } from './views/recalls.js'
import { RunView } from './views/run.js'
import { SearchView } from './views/search.js'
import { SettingsView } from './views/settings.js'
import { SignInView, SignUpView } from './views/sign-in.js'
import { NoOrgView, OrganizationView } from './views/organization.js'
import { ThreadsView, ThreadView } from './views/threads.js'
import { AccessView } from './views/access.js'
import { AgentSettingsView } from './views/agent.js'
import { AutomationsView } from './views/automations.js'
import { KnowledgeView } from './views/knowledge.js'
import { ModelsView } from './views/models.js'
import { SkillsView } from './views/skills.js'
import './styles.css'

const NAV = [
  { to: '/threads', label: 'Conversations', active: (p: string) => p.startsWith('/threads') },
  { to: '/', label: 'Browse', active: (p: string) => p === '/' || p.startsWith('/items/') },
  { to: '/search', label: 'Search', active: (p: string) => p === '/search' },
  { to: '/captures', label: 'Capture outbox', active: (p: string) => p === '/captures' },
  { to: '/recalls', label: 'Recall ledger', active: (p: string) => p === '/recalls' || p.startsWith('/runs/') },
  { to: '/settings', label: 'Settings', active: (p: string) => p === '/settings' },
  { to: '/organization', label: 'Organization', active: (p: string) => p === '/organization' },
  { to: '/knowledge', label: 'Knowledge', active: (p: string) => p === '/knowledge' },
  { to: '/skills', label: 'Skills', active: (p: string) => p === '/skills' },
  { to: '/automations', label: 'Automations', active: (p: string) => p === '/automations' }
]

/** The organization's configuration: what an admin sets up (members read it too). */
const ADMIN_NAV = [
  { to: '/models', label: 'Models' },
  { to: '/access', label: 'Access' },
  { to: '/agent', label: 'Agent settings' },
  { to: '/knowledge', label: 'Knowledge' },
  { to: '/skills', label: 'Skills' },
  { to: '/automations', label: 'Automations' }
]

function ReleaseBanner() {
  return (
    <div class="banner" role="alert">
      <p>
        A new version is available:{' '}
        <button type="button" onClick={() => location.reload()}>
          reload
        </button>
      </p>
    </div>
  )
}

function Who({ who, onChanged }: { who: Identity; onChanged: () => void }) {
  const signOut = useAction(async () => {
    await api('POST', '/auth/sign-out')
    onChanged()
    navigate('/sign-in')
  })
  const switchOrg = useAction(async (organizationId: string) => {
    await api('POST', '/auth/organizations/active', { organizationId })
    onChanged()
  })
  if (who.kind === 'dev') {
    return (
      <div class="who">
        <span>Dev organization (this machine)</span> <Link to="/sign-in">Sign in</Link>
      </div>
    )
  }
  if (who.kind === 'anonymous')
    return (
      <div class="who">
        <Link to="/sign-in">Sign in</Link> <Link to="/sign-up">Create an account</Link>
      </div>
    )
  const orgs = who.session.organizations
  return (
    <div class="who">
      <span title={who.session.user.email}>{who.session.user.name || who.session.user.email}</span>
      {orgs.length > 1 ? (
        <label class="org-pick">
          <span class="visually-hidden">Organization</span>
          <select
            value={who.org?.id}
            disabled={switchOrg.pending}
            onChange={(e) => switchOrg.run((e.target as HTMLSelectElement).value)}
          >
            {orgs.map((o) => (
              <option key={o.id} value={o.id}>
                {o.name}
              </option>
            ))}
          </select>
        </label>
      ) : who.org ? (
        <span class="muted">{who.org.name}</span>
      ) : null}
      <button type="button" class="link" onClick={() => signOut.run()} disabled={signOut.pending}>
        Sign out
      </button>
      {signOut.error || switchOrg.error ? (
        <span role="alert" class="inline-error">
          {messageOf(signOut.error ?? switchOrg.error)}
        </span>
      ) : null}
    </div>
  )
}

/**
 * The view of the address. `who` is null while the page asks who it acts as (one request,
 * answered without the database for the dev org): every view but sign-in and sign-up waits
 * for it, so a signed-out person or one without an organization is never sent a request
 * the server must refuse (a 401 or 403 the browser would report as an error).
 */
function Page({ who, reloadWho }: { who: Identity | null; reloadWho: () => void }) {
  const { path, params } = useLocation()
  if (path === '/sign-in')
    return (
      <SignInView
        onSignedIn={() => {
          reloadWho()
          navigate('/')
        }}
      />
    )
  if (path === '/sign-up')
    return (
      <SignUpView
        onSignedUp={() => {
          reloadWho()
          navigate('/')
        }}
      />
    )
  if (who === null) return <Loading what="your session" />
  // a person without an organization is led to create one (every other view needs one)
  if (who.kind === 'user' && who.org === null) return <NoOrgView created={reloadWho} />
  if (who.kind === 'anonymous') {
    return (
      <section aria-labelledby="need-sign-in">
        <h1 id="need-sign-in">Sign in to use the Memory Hub</h1>
        <p>
          The Memory Hub shows and corrects what Cairn remembers for your organization.{' '}
          <Link to="/sign-in">Sign in</Link> to continue, or <Link to="/sign-up">create an account</Link>.
        </p>
      </section>
    )
  }
  let m: Record<string, string> | null
  if (path === '/') return <BrowseView params={params} />
  if (path === '/search') return <SearchView params={params} />
  if ((m = match('/items/:id', path))) return <ItemView key={m.id} who={who} id={m.id!} params={params} />
  if (path === '/captures') return <CapturesView params={params} />
  if (path === '/recalls') return <RecallsView params={params} />
  if ((m = match('/runs/:id', path))) return <RunView id={m.id!} />
  if (path === '/threads') return <ThreadsView params={params} />
  if ((m = match('/threads/:id', path))) return <ThreadView key={m.id} who={who} id={m.id!} />
  if (path === '/settings') return <SettingsView who={who} />
  if (path === '/organization') return <OrganizationView who={who} changed={reloadWho} />
  if (path === '/models') return <ModelsView who={who} />
  if (path === '/access') return <AccessView who={who} changed={reloadWho} />
  if (path === '/agent') return <AgentSettingsView who={who} />
  if (path === '/knowledge') return <KnowledgeView params={params} />
  if (path === '/skills') return <SkillsView params={params} />
  if (path === '/automations') return <AutomationsView params={params} />
  return (
    <section aria-labelledby="not-found">
      <h1 id="not-found">No such page</h1>
      <p>
        <Link to="/">Back to browsing memory</Link>
      </p>
    </section>
  )
}

function App() {
  const [stale, setStale] = useState(false)
  const [who, loadWhoAgain] = useLoad('identity', loadIdentity)
  // Between a sign-in, sign-up or switch and the answer of who the page now acts as, no view
  // is shown: the identity on screen is the old one (the dev org, say), and a view drawn for it
  // would send its requests with the new session (a person without an organization is refused).
  const [refreshing, setRefreshing] = useState(false)
  const reloadWho = useCallback(() => {
    setRefreshing(true)
    loadWhoAgain()
  }, [loadWhoAgain])
  useEffect(() => {
    if (who.status !== 'loading') setRefreshing(false)
  }, [who])
  const { path } = useLocation()
  const main = useRef<HTMLElement>(null)
  useEffect(() => onReleaseMismatch(() => setStale(true)), [])
  // after a client-side navigation, keyboard and screen-reader users start at the new page
  const first = useRef(true)
  useEffect(() => {
    if (first.current) {
      first.current = false
      return
    }
    main.current?.focus()
  }, [path])
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      {stale ? <ReleaseBanner /> : null}
      <header class="top">
        <div class="bar">
          <Link to="/" class="brand">
            Cairn <span>Memory Hub</span>
          </Link>
          {who.status === 'ok' ? <Who who={who.data} onChanged={reloadWho} /> : null}
        </div>
        <nav aria-label="Memory Hub">
          <ul>
            {NAV.map((item) => (
              <li key={item.to}>
                <Link to={item.to} aria-current={item.active(path) ? 'page' : undefined}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <nav aria-label="Admin">
          <ul>
            <li class="nav-label" aria-hidden="true">
              Admin
            </li>
            {ADMIN_NAV.map((item) => (
              <li key={item.to}>
                <Link to={item.to} aria-current={path === item.to ? 'page' : undefined}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        {who.status === 'error' ? (
          <ErrorBox error={who.error} retry={reloadWho} />
        ) : (
          <Page who={who.status === 'ok' && !refreshing ? who.data : null} reloadWho={reloadWho} />
        )}
      </main>
      <footer class="bottom">
        <p class="muted">
          The console uses Cairn's public HTTP API: its reference is at <a href="/docs">/docs</a> (OpenAPI at{' '}
          <a href="/openapi.json">/openapi.json</a>).
        </p>
      </footer>
    </>
  )
}

const root = document.getElementById('app')!
// the page's "Loading…" placeholder goes; render adds to a container, it does not replace it
root.textContent = ''
render(<App />, root)
