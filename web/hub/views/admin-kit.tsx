// Pieces the admin pages share: a modal that asks before a destructive action, the
// problems a refused write names, search snippets with their marks
// (built as elements from text, never parsed as HTML), and a cursor pager kept in the address.
import type { ComponentChildren } from 'preact'
import { useEffect, useId, useRef } from 'preact/hooks'
import { ApiError } from '../api.js'
import { ErrorBox } from '../ui.js'
import './admin.css'

/**
 * A modal dialog shown while `open`: Escape or Cancel closes it (`onClose`), the browser keeps the
 * focus inside it, and `initial` (a selector inside it) has the focus first.
 */
export function Modal({
  open,
  onClose,
  labelledBy,
  describedBy,
  children
}: {
  open: boolean
  onClose: () => void
  labelledBy: string
  describedBy?: string
  children: ComponentChildren
}) {
  const ref = useRef<HTMLDialogElement>(null)
  useEffect(() => {
    const d = ref.current
    if (!d) return
    if (open && !d.open) d.showModal()
    if (!open && d.open) d.close()
  }, [open])
  return (
    <dialog
      ref={ref}
      aria-labelledby={labelledBy}
      aria-describedby={describedBy}
      onClose={onClose}
      class="admin-dialog"
    >
      {open ? children : null}
    </dialog>
  )
}

/**
 * Asks before a destructive action, on every admin page: a modal dialog named by its question
 * (`aria-labelledby`) and described by what follows (`aria-describedby`), the action's button and
 * Cancel. Cancel has the focus, so Enter on an unread dialog changes nothing; Escape cancels too;
 * while it is open the rest of the page is inert, so Tab stays inside it. A refused action shows
 * the API's error (and each problem it names) inside the dialog.
 */
export function Confirm({
  open,
  id,
  title,
  children,
  action,
  pending,
  error,
  onConfirm,
  onCancel
}: {
  open: boolean
  /** the question's id; one is made up when none is given */
  id?: string
  title: string
  children?: ComponentChildren
  action: string
  pending: boolean
  error: unknown
  onConfirm: () => void
  onCancel: () => void
}) {
  const made = useId()
  const titleId = id ?? `confirm-${made}`
  const bodyId = `${titleId}-body`
  return (
    <Modal open={open} onClose={onCancel} labelledBy={titleId} describedBy={children ? bodyId : undefined}>
      <h2 id={titleId}>{title}</h2>
      {children ? <div id={bodyId}>{children}</div> : null}
      {error ? <Refused error={error} /> : null}
      <div class="row">
        <button type="button" class="danger" disabled={pending} onClick={onConfirm}>
          {pending ? 'Working…' : action}
        </button>
        <button type="button" class="secondary" onClick={onCancel} autoFocus>
          Cancel
        </button>
      </div>
    </Modal>
  )
}

/** The API's error for a refused write, with each problem it names (a SKILL.md's line and column too). */
export function Refused({ error }: { error: unknown }) {
  const details = error instanceof ApiError ? error.details : []
  return (
    <div class="refused">
      <ErrorBox error={error} />
      {details.length > 0 ? (
        <ul class="problems" aria-label="Problems">
          {details.map((d, i) => (
            <li key={i}>
              {d.line !== undefined ? (
                <strong>
                  Line {d.line}
                  {d.column !== undefined ? `, column ${d.column}` : ''}:{' '}
                </strong>
              ) : d.path ? (
                <code>{d.path}</code>
              ) : null}{' '}
              {d.message}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  )
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }
/** The text an HTML-escaped string stands for (`&lt;b&gt;` is `<b>`): entities decoded, nothing parsed. */
export function unescapeHtml(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (whole, name: string) => {
    if (name[0] === '#') {
      const code = name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10)
      return Number.isFinite(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole
    }
    return ENTITIES[name.toLowerCase()] ?? whole
  })
}

/**
 * A search snippet (HTML-escaped text with its matches between `<mark>` and `</mark>`) as text
 * nodes and `<mark>` elements: every other character stays text, whatever the record holds.
 */
export function Snippet({ html }: { html: string }) {
  const parts = html.split(/<mark>|<\/mark>/)
  return (
    <p class="content snippet">
      {parts.map((part, i) => (i % 2 === 1 ? <mark key={i}>{unescapeHtml(part)}</mark> : unescapeHtml(part)))}
    </p>
  )
}

/** A cursor pager over the address's `param`: back to the first page, or on to the next. */
export function Pager({
  label,
  cursor,
  next,
  onChange
}: {
  label: string
  cursor: string | undefined
  next: string | null
  onChange: (cursor: string | undefined) => void
}) {
  if (cursor === undefined && next === null) return null
  return (
    <nav class="pager" aria-label={label}>
      <button type="button" class="secondary" disabled={cursor === undefined} onClick={() => onChange(undefined)}>
        ← First page
      </button>
      <button type="button" class="secondary" disabled={next === null} onClick={() => onChange(next ?? undefined)}>
        Next page →
      </button>
    </nav>
  )
}

/** How many a page of these lists holds: an org's busy list is paged, never drawn whole. */
export const PAGE = 20

/** `value` read from an `<input>`, `<select>` or `<textarea>` event. */
export const valueOf = (e: Event) => (e.target as HTMLInputElement).value

/** Comma-separated tags as the API takes them: trimmed, empties dropped. */
export const tagsOf = (text: string) =>
  text
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '')
