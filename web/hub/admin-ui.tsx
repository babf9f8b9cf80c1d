// Pieces the admin pages share (the question before anything is removed is views/admin-kit.tsx's
// Confirm): a value shown once with a copy button, and the note a person who is not an admin reads instead of a form.
import { useState } from 'preact/hooks'

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
