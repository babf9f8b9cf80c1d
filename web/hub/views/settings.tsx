import { api, type MemorySettings } from '../api.js'
import { isAdmin, type Identity } from '../identity.js'
import { ErrorBox, Loading, useAction, useLoad } from '../ui.js'

/** The admin's memory switches for the organization: memory itself, and learning facts from conversations. */
export function SettingsView({ who }: { who: Identity }) {
  const [state, reload] = useLoad('settings', () => api<MemorySettings>('GET', '/memory/settings'))
  const admin = isAdmin(who)
  const toggle = useAction(async (enabled: boolean) => {
    await api<MemorySettings>('PUT', '/memory/settings', { enabled })
    reload()
  })
  const extraction = useAction(async (enabled: boolean, extract: boolean) => {
    await api<MemorySettings>('PUT', '/memory/settings', { enabled, extract })
    reload()
  })
  return (
    <section aria-labelledby="settings-title">
      <h1 id="settings-title">Settings</h1>
      {state.status === 'loading' ? <Loading what="settings" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <div class="card">
          <div class="switch-row">
            <label for="memory-switch">
              <strong>Memory for this organization</strong>
            </label>
            <button
              id="memory-switch"
              type="button"
              role="switch"
              aria-checked={state.data.orgEnabled}
              class={`switch ${state.data.orgEnabled ? 'on' : 'off'}`}
              disabled={!admin || toggle.pending}
              onClick={() => toggle.run(!state.data.orgEnabled)}
            >
              <span aria-hidden="true">{state.data.orgEnabled ? 'On' : 'Off'}</span>
            </button>
          </div>
          <p class="muted">
            When it is off, runs of this organization neither recall nor capture anything, and the pools read as empty.
            Stored facts are kept and come back when it is turned on again.
          </p>
          {state.data.backend === 'off' ? (
            <p class="notice">
              This server has no memory backend (<code>MEMORY_BACKEND=off</code>): memory stays off whatever this switch
              says.
            </p>
          ) : null}
          <div class="switch-row">
            <label for="extract-switch">
              <strong>Learn facts from conversations</strong>
            </label>
            <button
              id="extract-switch"
              type="button"
              role="switch"
              aria-checked={state.data.extract}
              class={`switch ${state.data.extract ? 'on' : 'off'}`}
              disabled={!admin || extraction.pending}
              onClick={() => extraction.run(state.data.orgEnabled, !state.data.extract)}
            >
              <span aria-hidden="true">{state.data.extract ? 'On' : 'Off'}</span>
            </button>
          </div>
          <p class="muted">
            When it is on, after each run that succeeds its model is asked once for the lasting facts of the
            conversation (at most ten), and they are kept like the facts a model remembers on its own. It costs one more
            model call per run.
          </p>
          {!admin ? <p class="notice">Only owners and admins of the organization can change this.</p> : null}
          {toggle.error ? <ErrorBox error={toggle.error} /> : null}
          {extraction.error ? <ErrorBox error={extraction.error} /> : null}
        </div>
      ) : null}
    </section>
  )
}
