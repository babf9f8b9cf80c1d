import { fileTypeFromBuffer } from 'file-type'

const TEXT_TYPES = new Set([
  'application/json',
  'application/xml',
  'application/javascript',
  'application/ecmascript',
  'application/x-ndjson',
  'application/yaml',
  'application/x-yaml',
  'application/toml',
  'application/sql',
  'application/csv',
  'application/x-sh'
])

/** The media type of a declared Content-Type, lower case, without parameters; null when it is not one. */
export function mediaTypeOf(declared: string | undefined): string | null {
  const type = declared?.split(';')[0]?.trim().toLowerCase()
  return type && /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*$/.test(type) ? type : null
}

export function isTextType(type: string): boolean {
  return type.startsWith('text/') || TEXT_TYPES.has(type) || type.endsWith('+json') || type.endsWith('+xml')
}

/**
 * The type of stored bytes. A known signature wins over the declared type;
 * bytes with none that look like text (no NUL in the head) keep a declared text type;
 * anything else is `application/octet-stream`.
 */
export async function sniffContentType(head: Buffer, declared: string | undefined): Promise<string> {
  const found = head.length > 0 ? await fileTypeFromBuffer(head) : undefined
  if (found) return found.mime
  const type = mediaTypeOf(declared)
  if (type && isTextType(type) && !head.includes(0)) return type
  return 'application/octet-stream'
}
