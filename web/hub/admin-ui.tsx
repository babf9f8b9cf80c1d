// Pieces the admin pages share: a question before anything is removed, a value shown once
// with a copy button, and the note a person who is not an admin reads instead of a form.
import type { ComponentChildren } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { ErrorBox } from './ui.js'

/**
 * A modal question before a destructive action: Cancel has the focus (Enter or Escape keeps
 * things as they are), the action says what it does, and its refusal is shown here.
 */
export function Confirm({
  open,
  title,
  children,
  action,
  pending,
  error,
  onConfirm,
  onCancel
}: {
  open: boolean
  title: string
  children?: ComponentChildren
  action: string
  pending: boolean
  error: unknown
  onConfirm: () => void
  onCancel: () => void
}) {
  const dialog = useRef<HTMLDialogElement>(null)
  useEffect(() => {
    const d = dialog.current
    if (!d) return
    if (open && !d.open) d.showModal()
    if (!open && d.open) d.close()
  }, [open])
  return (
    <dialog ref={dialog} aria-labelledby="confirm-admin-title" onClose={onCancel}>
      <h2 id="confirm-admin-title">{title}</h2>
      {children}
      {error ? <ErrorBox error={error} /> : null}
      <div class="row">
        <button type="button" class="danger" disabled={pending} onClick={onConfirm}>
          {pending ? 'Working…' : action}
        </button>
        <button type="button" class="secondary" onClick={onCancel} autoFocus>
          Cancel
        </button>
      </div>
    </dialog>
  )
}

/** A secret shown once (a new API key): selectable text and a copy button. */
export function ShownOnce({ label, value }: { label: string; value: string }) {
  const [copied, setCopied] = useState<'yes' | 'no' | null>(null)
  const copy = () => {
    navigator.clipboard.writeText(value).then(
      () => setCopied('yes'),
      () => setCopied('no')
    )
  }
  return (
    <div class="card once" role="region" aria-label={label}>
      <p>
        <strong>{label}</strong> It is shown this once: copy it now, Cairn keeps only a hash of it.
      </p>
      <p class="row">
        <code class="secret-value">{value}</code>
        <button type="button" class="secondary" onClick={copy}>
          Copy
        </button>
        {copied === 'yes' ? (
          <span role="status" class="ok">
            Copied.
          </span>
        ) : copied === 'no' ? (
          <span role="status">The browser refused to copy: select the text and copy it yourself.</span>
        ) : null}
      </p>
    </div>
  )
}

export function AdminsOnly({ what }: { what: string }) {
  return <p class="notice">Only owners and admins of the organization can {what}.</p>
}
