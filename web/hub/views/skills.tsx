import { useRef, useState } from 'preact/hooks'
import type { Skill, SkillReply, Skills } from '../admin-api.js'
import { api, query, type RunReply, type ThreadList } from '../api.js'
import { navigate } from '../router.js'
import { Empty, ErrorBox, Loading, useAction, useLoad } from '../ui.js'
import { Confirm, Modal, PAGE, Pager, Refused, valueOf } from './admin-kit.js'

const EXAMPLE = `---
name: release-notes
description: Writes release notes from a list of merged changes.
allowed-tools: read_file
---
List the changes as bullet points, newest first, one line each.`

/** What a saved skill's `allowed-tools` gives its runs differently from what the file says. */
function Warnings({ skill, live = false }: { skill: Skill; live?: boolean }) {
  if (skill.warnings.length === 0) return null
  return (
    <div class="warnings" role={live ? 'status' : undefined}>
      <p>
        <strong>
          {skill.warnings.length === 1 ? 'A warning' : `${skill.warnings.length} warnings`} about {skill.name}:
        </strong>
      </p>
      <ul>
        {skill.warnings.map((w, i) => (
          <li key={i}>{w}</li>
        ))}
      </ul>
    </div>
  )
}

/**
 * Skills: add one from a SKILL.md (pasted, or read from a file), the org's skills a page at a
 * time with their warnings, and for each: run it (in a new thread or one of the org's), edit its
 * SKILL.md, delete it. `?thread=` names the thread a run goes to by default (the current one).
 */
export function SkillsView({ params }: { params: URLSearchParams }) {
  const cursor = params.get('cursor') ?? undefined
  const thread = params.get('thread') ?? undefined
  const [changed, setChanged] = useState(0)
  const [state, reload] = useLoad(
    `skills ${cursor ?? ''} ${changed}`,
    () => api<Skills>('GET', `/skills${query({ limit: PAGE, cursor })}`),
    { keep: true }
  )
  const [running, setRunning] = useState<Skill | null>(null)
  const [editing, setEditing] = useState<Skill | null>(null)
  const [deleting, setDeleting] = useState<Skill | null>(null)
  const remove = useAction(async () => {
    await api('DELETE', `/skills/${encodeURIComponent(deleting!.id)}`)
    setDeleting(null)
    setChanged((n) => n + 1)
  })
  return (
    <section aria-labelledby="skills-title">
      <h1 id="skills-title">Skills</h1>
      <p class="lede">
        A skill is a SKILL.md: YAML front matter (name, description, allowed tools), then the instructions a run
        follows.
      </p>
      <AddSkill added={() => setChanged((n) => n + 1)} />
      <h2 id="skill-list-title">The organization's skills</h2>
      {state.status === 'loading' ? <Loading what="skills" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        state.data.items.length === 0 ? (
          <Empty>
            <p>No skills yet: paste or upload a SKILL.md above.</p>
          </Empty>
        ) : (
          <>
            <ul class="cards" aria-labelledby="skill-list-title">
              {state.data.items.map((s) => (
                <li key={s.id} class="card skill">
                  <h3>{s.name}</h3>
                  <p class="content">{s.description}</p>
                  <p class="meta">
                    version {s.version}
                    {s.allowedTools.length > 0 ? ` · allowed tools: ${s.allowedTools.join(' ')}` : ''}
                    {s.source.kind === 'github' ? ` · from ${s.source.repo}/${s.source.path}` : ''}
                  </p>
                  <Warnings skill={s} />
                  <div class="row actions">
                    <button type="button" aria-label={`Run… ${s.name}`} onClick={() => setRunning(s)}>
                      Run…
                    </button>
                    <button
                      type="button"
                      class="secondary"
                      aria-label={`Edit… ${s.name}`}
                      onClick={() => setEditing(s)}
                    >
                      Edit…
                    </button>
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Delete… ${s.name}`}
                      onClick={() => setDeleting(s)}
                    >
                      Delete…
                    </button>
                  </div>
                </li>
              ))}
            </ul>
            <Pager
              label="Pages of skills"
              cursor={cursor}
              next={state.data.nextCursor}
              onChange={(c) => navigate(`/skills${query({ cursor: c, thread })}`)}
            />
          </>
        )
      ) : null}
      <Modal open={running !== null} onClose={() => setRunning(null)} labelledBy="run-skill-title">
        {running ? <RunSkill skill={running} thread={thread} close={() => setRunning(null)} /> : null}
      </Modal>
      <Modal open={editing !== null} onClose={() => setEditing(null)} labelledBy="edit-skill-title">
        {editing ? (
          <EditSkill
            key={editing.id}
            skill={editing}
            close={() => setEditing(null)}
            saved={() => setChanged((n) => n + 1)}
          />
        ) : null}
      </Modal>
      <Confirm
        open={deleting !== null}
        id="delete-skill-title"
        title="Delete this skill?"
        action="Delete skill"
        pending={remove.pending}
        error={remove.error}
        onConfirm={() => remove.run()}
        onCancel={() => setDeleting(null)}
      >
        <p>Runs and automations can no longer start it.</p>
        {deleting ? <blockquote class="content">{deleting.name}</blockquote> : null}
      </Confirm>
    </section>
  )
}

function AddSkill({ added }: { added: () => void }) {
  const [text, setText] = useState('')
  const [saved, setSaved] = useState<Skill | null>(null)
  const file = useRef<HTMLInputElement>(null)
  const [readError, setReadError] = useState<string | null>(null)
  const save = useAction(async () => {
    const { skill } = await api<SkillReply>('POST', '/skills', { skillMd: text })
    setText('')
    setSaved(skill)
    added()
  })
  const read = async () => {
    const f = file.current?.files?.[0]
    setReadError(null)
    if (!f) return
    try {
      setText(await f.text())
      setSaved(null)
    } catch {
      setReadError(`${f.name} could not be read.`)
    }
  }
  return (
    <form
      class="card stack paste"
      aria-labelledby="add-skill-title"
      onSubmit={(e) => {
        e.preventDefault()
        setSaved(null)
        if (text.trim() !== '') save.run()
      }}
    >
      <h2 id="add-skill-title">Add a skill</h2>
      <label for="skill-file">Read a SKILL.md file (its text appears below)</label>
      <input
        id="skill-file"
        ref={file}
        type="file"
        accept=".md,text/markdown,text/plain"
        onChange={() => void read()}
      />
      {readError ? (
        <p role="alert" class="state error">
          {readError}
        </p>
      ) : null}
      <label for="skill-md">SKILL.md</label>
      <textarea
        id="skill-md"
        rows={9}
        spellcheck={false}
        placeholder={EXAMPLE}
        value={text}
        onInput={(e) => {
          setSaved(null)
          setText(valueOf(e))
        }}
      />
      <button type="submit" disabled={save.pending || text.trim() === ''}>
        {save.pending ? 'Saving…' : 'Save skill'}
      </button>
      {saved ? (
        <div role="status">
          <p class="ok">Saved the skill {saved.name}.</p>
        </div>
      ) : null}
      {saved ? <Warnings skill={saved} live /> : null}
      {save.error ? <Refused error={save.error} /> : null}
    </form>
  )
}

/** Runs a skill with an input, in a new thread or one of the org's (the current one first), then opens that thread. */
function RunSkill({ skill, thread, close }: { skill: Skill; thread: string | undefined; close: () => void }) {
  const [input, setInput] = useState('')
  const [target, setTarget] = useState(thread ?? '')
  const [threads] = useLoad('skill threads', () => api<ThreadList>('GET', `/threads${query({ limit: 10 })}`))
  const run = useAction(async () => {
    const body: Record<string, unknown> = {}
    if (input.trim() !== '') body.input = input
    if (target !== '') body.rootRunId = target
    const { run: started } = await api<RunReply>('POST', `/skills/${encodeURIComponent(skill.id)}/run`, body)
    close()
    navigate(`/threads/${encodeURIComponent(started.rootRunId)}`)
  })
  const list = threads.status === 'ok' ? threads.data.items : []
  return (
    <form
      class="stack"
      onSubmit={(e) => {
        e.preventDefault()
        run.run()
      }}
    >
      <h2 id="run-skill-title">Run {skill.name}</h2>
      <label for="skill-input">Input (optional)</label>
      <textarea id="skill-input" rows={4} maxLength={100_000} value={input} onInput={(e) => setInput(valueOf(e))} />
      <label for="skill-thread">Thread</label>
      <select id="skill-thread" value={target} onChange={(e) => setTarget(valueOf(e))}>
        <option value="">A new thread</option>
        {thread !== undefined && !list.some((t) => t.rootRunId === thread) ? (
          <option value={thread}>The current thread</option>
        ) : null}
        {list.map((t) => (
          <option key={t.rootRunId} value={t.rootRunId}>
            {t.rootRunId === thread ? 'The current thread: ' : ''}
            {t.title.slice(0, 80)}
          </option>
        ))}
      </select>
      {threads.status === 'error' ? <ErrorBox error={threads.error} /> : null}
      {run.error ? <Refused error={run.error} /> : null}
      <div class="row">
        <button type="submit" disabled={run.pending}>
          {run.pending ? 'Starting…' : 'Run skill'}
        </button>
        <button type="button" class="secondary" onClick={close}>
          Cancel
        </button>
      </div>
    </form>
  )
}

/** A skill's SKILL.md as the server has it, edited whole; the version it was loaded at goes with the change. */
function EditSkill({ skill, close, saved }: { skill: Skill; close: () => void; saved: () => void }) {
  const path = `/skills/${encodeURIComponent(skill.id)}`
  const [state, reload] = useLoad(`skill ${skill.id}`, async () => {
    const [{ skill: fresh }, file] = await Promise.all([
      api<SkillReply>('GET', path),
      api<string>('GET', `${path}/skill.md`)
    ])
    return { fresh, file }
  })
  const [text, setText] = useState<string | null>(null)
  const [result, setResult] = useState<Skill | null>(null)
  const save = useAction(async () => {
    const { skill: next } = await api<SkillReply>('PATCH', path, {
      skillMd: text ?? (state.status === 'ok' ? state.data.file : ''),
      version: result?.version ?? (state.status === 'ok' ? state.data.fresh.version : skill.version)
    })
    setResult(next)
    setText(null)
    saved()
  })
  const file = text ?? (state.status === 'ok' ? state.data.file : '')
  return (
    <>
      <h2 id="edit-skill-title">Edit {skill.name}</h2>
      {state.status === 'loading' ? <Loading what="its SKILL.md" /> : null}
      {state.status === 'error' ? <ErrorBox error={state.error} retry={reload} /> : null}
      {state.status === 'ok' ? (
        <form
          class="stack"
          onSubmit={(e) => {
            e.preventDefault()
            setResult(null)
            if (file.trim() !== '') save.run()
          }}
        >
          <label for="edit-skill-md">SKILL.md</label>
          <textarea
            id="edit-skill-md"
            class="file"
            rows={14}
            spellcheck={false}
            value={file}
            onInput={(e) => {
              setResult(null)
              setText(valueOf(e))
            }}
          />
          {result ? (
            <div role="status">
              <p class="ok">Saved: version {result.version}.</p>
            </div>
          ) : null}
          {result ? <Warnings skill={result} live /> : null}
          {save.error ? <Refused error={save.error} /> : null}
          <div class="row">
            <button type="submit" disabled={save.pending || file.trim() === ''}>
              {save.pending ? 'Saving…' : 'Save skill'}
            </button>
            <button type="button" class="secondary" onClick={close}>
              {result ? 'Close' : 'Cancel'}
            </button>
          </div>
        </form>
      ) : null}
    </>
  )
}
