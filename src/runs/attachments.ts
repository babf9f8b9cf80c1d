// A run's attachments: the uploads it names are copied into its thread's
// workspace under attachments/<file name> before it starts (inside the confinement, like
// write_file), and the model's user message lists them, with the small text files inlined.
import type { RunArtifacts } from './ports/artifacts.js'
import { EngineError } from './engines/types.js'

/** Text files up to this size are inlined in the user message. */
export const INLINE_MAX_BYTES = 32 * 1024

/** A file name safe as one path segment of the workspace: no slashes, no control characters, not `.` or `..`. */
export function attachmentName(name: string): string {
  // eslint-disable-next-line no-control-regex
  const clean = name.replace(/[/\\\u0000-\u001f\u007f]+/g, '_').trim()
  const safe = clean === '' || /^\.+$/.test(clean) ? 'file' : clean
  return [...safe].slice(0, 200).join('')
}

const isText = (contentType: string): boolean => {
  const type = contentType.split(';')[0]!.trim().toLowerCase()
  return (
    type.startsWith('text/') || type === 'application/json' || type.endsWith('+json') || type === 'application/x-ndjson'
  )
}

/** The file as UTF-8 text, or null when it is not valid UTF-8. */
function utf8(data: Buffer): string | null {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(data)
  } catch {
    return null
  }
}

/** A Markdown fence longer than any run of backticks in the text. */
const fenceFor = (text: string): string =>
  '`'.repeat(Math.max(3, ...[...text.matchAll(/`+/g)].map((m) => m[0].length + 1)))

export interface PreparedAttachments {
  paths: string[]
  message: string
}

/**
 * Reads the run's attachments and puts them in its workspace (`put`, false when this
 * server has no sandbox); an upload deleted since the run was accepted fails the run,
 * naming it. Returns what the user message says of them.
 */
export async function prepareAttachments(
  artifacts: Pick<RunArtifacts, 'uploadsOf' | 'readUpload'>,
  run: { orgId: string; attachments: string[] },
  put: ((files: Array<{ path: string; data: Buffer }>) => Promise<boolean>) | null
): Promise<PreparedAttachments> {
  const uploads = new Map((await artifacts.uploadsOf(run.orgId, run.attachments)).map((u) => [u.id, u]))
  const used = new Set<string>()
  const files: Array<{ path: string; data: Buffer; contentType: string }> = []
  for (const id of run.attachments) {
    const upload = uploads.get(id)
    const data = upload ? await artifacts.readUpload(run.orgId, id) : null
    if (!upload || !data) throw new EngineError(`attachment_missing: the upload ${JSON.stringify(id)} no longer exists`)
    let name = attachmentName(upload.name)
    if (used.has(name)) name = `${id}-${name}`
    used.add(name)
    files.push({ path: `attachments/${name}`, data, contentType: upload.contentType })
  }
  const copied = put ? await put(files.map(({ path, data }) => ({ path, data }))) : false
  const lines = [
    copied
      ? 'Attached files (in your workspace):'
      : 'Attached files (this server has no sandbox, so they are not in a workspace):'
  ]
  for (const f of files) lines.push(`- ${f.path} (${f.contentType}, ${f.data.length} bytes)`)
  for (const f of files) {
    if (!isText(f.contentType) || f.data.length > INLINE_MAX_BYTES) continue
    const text = utf8(f.data)
    if (text === null) continue
    const fence = fenceFor(text)
    lines.push('', `${f.path}:`, fence, text.endsWith('\n') ? text.slice(0, -1) : text, fence)
  }
  return { paths: files.map((f) => f.path), message: lines.join('\n') }
}
