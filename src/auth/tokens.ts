import { randomFillSync } from 'node:crypto'
import { sha256 } from '@oslojs/crypto/sha2'
import { constantTimeEqual } from '@oslojs/crypto/subtle'
import {
  decodeHex,
  encodeBase32LowerCaseNoPadding,
  encodeBase64urlNoPadding,
  encodeHexLowerCase
} from '@oslojs/encoding'

/** API keys: a fixed literal prefix and 32 random bytes (256 bits) in base64url. */
export const API_KEY_PREFIX = 'cairn_'
export const API_KEY_PATTERN = /^cairn_[A-Za-z0-9_-]{43}$/
/** Session tokens: 25 random bytes (200 bits) in lower-case base32, 40 characters. */
export const SESSION_TOKEN_PATTERN = /^[a-z2-7]{40}$/

function randomBytes(length: number): Uint8Array {
  const bytes = new Uint8Array(length)
  randomFillSync(bytes)
  return bytes
}

export function generateSessionToken(): string {
  return encodeBase32LowerCaseNoPadding(randomBytes(25))
}

export function generateApiKey(): string {
  return API_KEY_PREFIX + encodeBase64urlNoPadding(randomBytes(32))
}

/** SHA-256 of a secret, hex: what the database keeps instead of the secret. */
export function hashSecret(secret: string): string {
  return encodeHexLowerCase(sha256(new TextEncoder().encode(secret)))
}

/** Compares two hex hashes without leaking where they differ. */
export function sameHash(a: string, b: string): boolean {
  if (a.length !== b.length || a.length % 2 !== 0) return false
  try {
    return constantTimeEqual(decodeHex(a), decodeHex(b))
  } catch {
    return false
  }
}
