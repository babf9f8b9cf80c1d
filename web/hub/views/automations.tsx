import { useState } from 'preact/hooks'
import type { Automation, AutomationReply, Automations, Skills } from '../admin-api.js'
import { api, query } from '../api.js'
import { navigate } from '../router.js'
import { Empty, ErrorBox, Loading, RunLink, Time, useAction, useLoad } from '../ui.js'
import { Confirm, PAGE, Pager, Refused, valueOf } from './admin-kit.js'

/** This browser's time zone: the one a new automation is read in unless another is chosen. */
function here(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'
  } catch {
    return 'UTC'
  }
}

let zones: string[] | null = null
/** The IANA zones this browser knows (the server checks the one sent); asked once, when the form is first drawn. */
function knownZones(): string[] {
  if (zones) return zones
  try {
    const all = Intl.supportedValuesOf('timeZone')
    zones = all.includes('UTC') ? all : ['UTC', ...all]
  } catch {
    zones = ['UTC']
  }
  return zones
}

/** One formatter per zone: making one is far dearer than using it (a page shows five times for each automation). */
const formats = new Map<string, Intl.DateTimeFormat>()
function formatIn(zone: string): Intl.DateTimeFormat {
  let format = formats.get(zone)
  if (!format) {
    format = new Intl.DateTimeFormat(undefined, {
      timeZone: zone,
      weekday: 'short',
      year: 'numeric',
      month: 'short',
      day: 'numeric',
      hour: '2-digit',
      minute: '2-digit',
      timeZoneName: 'short'
    })
    formats.set(zone, format)
  }
  return format
}

/** A fire time in the automation's own zone, with the UTC instant in the element's `datetime`. */
function FireTime({ iso, zone }: { iso: string; zone: string }) {
  let text: string
  try {
    text = formatIn(zone).format(new Date(iso))
  } catch {
    text = iso
  }
  return (
    <time dateTime={iso} title={iso}>
      {text}
    </time>
  )
}

function targetText(a: Automation): string {
  const t = a.target
  if ('prompt' in t) return `prompt: ${t.prompt.length > 120 ? `${t.prompt.slice(0, 120)}…` : t.prompt}`
  if ('skillId' in t) return `skill ${t.skillId}`
  return `playbook ${t.playbookId}`
}

/**
 * Automations: create one (a cron read in a time zone, and what it starts), then the org's
 * automations a page at a time, each with its next fire times, pause or resume, delete.
 */
export function AutomationsView({ params }: { params: URLSearchParams }) {
  const cursor = params.get('cursor') ?? undefined
  const [changed, setChanged] = useState(0)
  const bump = () => setChanged((n) => n + 1)
  const [state, reload] = useLoad(
    `automations ${cursor ?? ''} ${changed}`,
    () => api<Automations>('GET', `/automations${query({ limit: PAGE, cursor })}`),
    { keep: true }
  )
  const [deleting, setDeleting] = useState<Automation | null>(null)
  const remove = useAction(async () => {
    await api('DELETE', `/automations/${encodeURIComponent(deleting!.id)}`)
    setDeleting(null)
    bump()
  })
  const toggle = useAction(async (a: Automation) => {
    await api('PATCH', `/automations/${encodeURIComponent(a.id)}`, { enabled: !a.enabled })
    bump()
  })
  return (
    <section aria-labelledby="automations-title">
      <h1 id="automations-title">Automations</h1>
      <p class="lede">
        An automation starts a run on a schedule: a cron (minute, hour, day of the month, month, day of the week) read
        in a time zone.
      </p>
      <CreateAutomation created={bump} />
      <h2 id="automation-list-title">The organization's automations</h2>
      {toggle.error ? <Refused error={toggle.error} /> : null}
      {state.status === 'loading' ? <Loading what="automations" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        state.data.items.length === 0 ? (
          <Empty>
            <p>No automations yet: create one above.</p>
          </Empty>
        ) : (
          <>
            <ul class="cards" aria-labelledby="automation-list-title">
              {state.data.items.map((a) => (
                <li key={a.id} class="card automation">
                  <h3>{a.name}</h3>
                  <p class="meta">
                    <span class={`badge ${a.enabled ? 'state-on' : 'state-paused'}`}>
                      {a.enabled ? 'Active' : 'Paused'}
                    </span>{' '}
                    <code>{a.cron}</code> in {a.timezone}: {a.description}
                  </p>
                  <p class="meta">{targetText(a)}</p>
                  {a.enabled && a.nextRuns.length > 0 ? (
                    <>
                      <p class="meta" id={`next-${a.id}`}>
                        Next fire times:
                      </p>
                      <ol class="next-runs" aria-labelledby={`next-${a.id}`}>
                        {a.nextRuns.map((iso) => (
                          <li key={iso}>
                            <FireTime iso={iso} zone={a.timezone} />
                          </li>
                        ))}
                      </ol>
                    </>
                  ) : (
                    <p class="meta">
                      {a.enabled ? 'It never fires again.' : 'Paused: it does not fire until resumed.'}
                    </p>
                  )}
                  <p class="meta">
                    Last fired: <Time iso={a.lastFiredAt} />
                    {a.lastRunId ? (
                      <>
                        {' '}
                        · <RunLink runId={a.lastRunId} />
                      </>
                    ) : null}
                  </p>
                  <div class="row actions">
                    <button
                      type="button"
                      class="secondary"
                      disabled={toggle.pending}
                      aria-label={`${a.enabled ? 'Pause' : 'Resume'} ${a.name}`}
                      onClick={() => toggle.run(a)}
                    >
                      {a.enabled ? 'Pause' : 'Resume'}
                    </button>
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Delete… ${a.name}`}
                      onClick={() => setDeleting(a)}
                    >
                      Delete…
                    </button>
                  </div>
                </li>
              ))}
            </ul>
            <Pager
              label="Pages of automations"
              cursor={cursor}
              next={state.data.nextCursor}
              onChange={(c) => navigate(`/automations${query({ cursor: c })}`)}
            />
          </>
        )
      ) : null}
      <Confirm
        open={deleting !== null}
        id="delete-automation-title"
        title="Delete this automation?"
        action="Delete automation"
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setDeleting(null)}
      >
        <p>It stops firing. The runs it started are kept.</p>
        {deleting ? <blockquote class="content">{deleting.name}</blockquote> : null}
      </Confirm>
    </section>
  )
}

function CreateAutomation({ created }: { created: () => void }) {
  const [name, setName] = useState('')
  const [cron, setCron] = useState('0 9 * * 1-5')
  const [zone, setZone] = useState(here)
  const [kind, setKind] = useState<'prompt' | 'skill'>('prompt')
  const [prompt, setPrompt] = useState('')
  const [skillId, setSkillId] = useState('')
  const [input, setInput] = useState('')
  const [catchUp, setCatchUp] = useState<'latest' | 'skip'>('latest')
  const [made, setMade] = useState<Automation | null>(null)
  // the skills a target may name: the newest 200 (a select, not a list to page through)
  const [skills] = useLoad(kind === 'skill' ? 'automation skills' : 'no skills', async () =>
    kind === 'skill' ? api<Skills>('GET', `/skills${query({ limit: 200 })}`) : null
  )
  const create = useAction(async () => {
    const target =
      kind === 'prompt'
        ? { prompt }
        : {
            skillId: skillId || (skills.status === 'ok' ? (skills.data?.items[0]?.id ?? '') : ''),
            ...(input ? { input } : {})
          }
    const { automation } = await api<AutomationReply>('POST', '/automations', {
      name: name.trim(),
      cron: cron.trim(),
      timezone: zone,
      target,
      catchUp
    })
    setName('')
    setPrompt('')
    setInput('')
    setMade(automation)
    created()
  })
  const ready = name.trim() !== '' && cron.trim() !== '' && (kind === 'prompt' ? prompt.trim() !== '' : true)
  const skillList = skills.status === 'ok' && skills.data ? skills.data.items : []
  return (
    <form
      class="card stack"
      aria-labelledby="create-automation-title"
      onSubmit={(e) => {
        e.preventDefault()
        setMade(null)
        if (ready) create.run()
      }}
    >
      <h2 id="create-automation-title">Create an automation</h2>
      <label for="automation-name">Name</label>
      <input id="automation-name" required maxLength={200} value={name} onInput={(e) => setName(valueOf(e))} />
      <label for="automation-cron">Cron</label>
      <input
        id="automation-cron"
        required
        maxLength={200}
        spellcheck={false}
        aria-describedby="automation-cron-help"
        value={cron}
        onInput={(e) => setCron(valueOf(e))}
      />
      <p id="automation-cron-help" class="muted">
        Five fields: minute, hour, day of the month, month, day of the week (<code>0 9 * * 1-5</code> is 09:00 on
        weekdays), or <code>@hourly</code>, <code>@daily</code>, <code>@weekly</code>.
      </p>
      <label for="automation-zone">Time zone</label>
      <select id="automation-zone" value={zone} onChange={(e) => setZone(valueOf(e))}>
        {(knownZones().includes(zone) ? knownZones() : [zone, ...knownZones()]).map((z) => (
          <option key={z} value={z}>
            {z}
          </option>
        ))}
      </select>
      <fieldset class="choice">
        <legend>It starts</legend>
        <label>
          <input
            type="radio"
            name="automation-kind"
            value="prompt"
            checked={kind === 'prompt'}
            onChange={() => setKind('prompt')}
          />{' '}
          A run with a prompt
        </label>
        <label>
          <input
            type="radio"
            name="automation-kind"
            value="skill"
            checked={kind === 'skill'}
            onChange={() => setKind('skill')}
          />{' '}
          A skill
        </label>
      </fieldset>
      {kind === 'prompt' ? (
        <>
          <label for="automation-prompt">Prompt</label>
          <textarea
            id="automation-prompt"
            rows={3}
            maxLength={100_000}
            value={prompt}
            onInput={(e) => setPrompt(valueOf(e))}
          />
        </>
      ) : (
        <>
          <label for="automation-skill">Skill</label>
          <select id="automation-skill" value={skillId} onChange={(e) => setSkillId(valueOf(e))}>
            {skillList.map((s) => (
              <option key={s.id} value={s.id}>
                {s.name}
              </option>
            ))}
          </select>
          {skills.status === 'ok' && skillList.length === 0 ? <p class="notice">There are no skills yet.</p> : null}
          {skills.status === 'error' ? <ErrorBox error={skills.error} /> : null}
          <label for="automation-input">Input (optional)</label>
          <textarea
            id="automation-input"
            rows={2}
            maxLength={100_000}
            value={input}
            onInput={(e) => setInput(valueOf(e))}
          />
        </>
      )}
      <label for="automation-catch-up">Ticks missed while Cairn was down</label>
      <select id="automation-catch-up" value={catchUp} onChange={(e) => setCatchUp(valueOf(e) as 'latest' | 'skip')}>
        <option value="latest">Fire once, for the latest missed tick</option>
        <option value="skip">Skip them</option>
      </select>
      <button type="submit" disabled={create.pending || !ready}>
        {create.pending ? 'Creating…' : 'Create automation'}
      </button>
      {made ? (
        <div role="status">
          <p class="ok">
            Created {made.name}: {made.description}.
          </p>
          {made.nextRuns[0] ? (
            <p>
              It fires next at <FireTime iso={made.nextRuns[0]} zone={made.timezone} />.
            </p>
          ) : null}
        </div>
      ) : null}
      {create.error ? <Refused error={create.error} /> : null}
    </form>
  )
}
