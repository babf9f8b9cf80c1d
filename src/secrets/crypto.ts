import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'

/**
 * Sealing of secret values: AES-256-GCM from node:crypto, a random 96-bit
 * nonce per write, and the org id and name as associated data, so a ciphertext copied to
 * another org or another name does not open. A sealed value is `nonce ‖ ciphertext ‖ tag`
 * beside the id of the key that sealed it.
 */

const NONCE_BYTES = 12
const TAG_BYTES = 16

export interface SecretKey {
  /** the first 16 hex digits of the key's SHA-256: which key sealed a row, never the key */
  id: string
  bytes: Buffer
}

export class KeyRingError extends Error {
  override name = 'KeyRingError'
}

/** A 32-byte key written in base64 (standard or URL alphabet); the message never repeats the value. */
export function parseKey(text: string, what: string): SecretKey {
  const trimmed = text.trim()
  const bytes = /^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)
    ? Buffer.from(trimmed, trimmed.includes('-') || trimmed.includes('_') ? 'base64url' : 'base64')
    : Buffer.alloc(0)
  if (bytes.length !== 32) {
    throw new KeyRingError(`${what} must be 32 random bytes written in base64 (openssl rand -base64 32)`)
  }
  return { id: createHash('sha256').update(bytes).digest('hex').slice(0, 16), bytes }
}

/** SECRETS_PREVIOUS_KEYS: comma-separated keys, each named by its place in the list when it is not one. */
export function parsePreviousKeys(list: string | undefined): SecretKey[] {
  return (list ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((text, i) => parseKey(text, `SECRETS_PREVIOUS_KEYS (key ${i + 1})`))
}

/** The current key seals; it and the previous ones open. */
export class KeyRing {
  readonly current: SecretKey
  private readonly byId: Map<string, SecretKey>

  constructor(current: SecretKey, previous: SecretKey[] = []) {
    this.current = current
    this.byId = new Map([...previous, current].map((k) => [k.id, k]))
  }

  static parse(current: string, previous = ''): KeyRing {
    return new KeyRing(parseKey(current, 'SECRETS_KEY'), parsePreviousKeys(previous))
  }

  /** the ids of the keys that open but no longer seal */
  get previousIds(): string[] {
    return [...this.byId.keys()].filter((id) => id !== this.current.id)
  }

  seal(orgId: string, name: string, value: string): { keyId: string; sealed: Buffer } {
    const nonce = randomBytes(NONCE_BYTES)
    const cipher = createCipheriv('aes-256-gcm', this.current.bytes, nonce)
    cipher.setAAD(associatedData(orgId, name))
    const body = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()])
    return { keyId: this.current.id, sealed: Buffer.concat([nonce, body, cipher.getAuthTag()]) }
  }

  /**
   * The value, or null when no key of the ring opens it (unknown key, or any bit changed, or moved to another org or
   * name).
   */
  open(orgId: string, name: string, keyId: string, sealed: Uint8Array): string | null {
    const key = this.byId.get(keyId)
    if (!key || sealed.length < NONCE_BYTES + TAG_BYTES) return null
    const bytes = Buffer.from(sealed)
    try {
      const decipher = createDecipheriv('aes-256-gcm', key.bytes, bytes.subarray(0, NONCE_BYTES))
      decipher.setAAD(associatedData(orgId, name))
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES))
      return Buffer.concat([
        decipher.update(bytes.subarray(NONCE_BYTES, bytes.length - TAG_BYTES)),
        decipher.final()
      ]).toString('utf8')
    } catch {
      return null
    }
  }
}

/** Versioned, and NUL-separated so no org id and name can be shifted into another pair. */
const associatedData = (orgId: string, name: string) => Buffer.from(`cairn.secret.v1\0${orgId}\0${name}`, 'utf8')

/** A fresh key in the form SECRETS_KEY takes. */
export const newKeyText = () => randomBytes(32).toString('base64')
