import { hash, verify, type Options } from '@node-rs/argon2'

/**
 * argon2id at OWASP's minimum (19 MiB, 2 passes, 1 lane). `algorithm` is @node-rs/argon2's
 * const enum Algorithm.Argon2id, spelled as its value because isolated modules cannot
 * read ambient const enums.
 */
const ARGON2ID: Options = {
  algorithm: 2 as NonNullable<Options['algorithm']>,
  memoryCost: 19456,
  timeCost: 2,
  parallelism: 1
}

export const PASSWORD_MIN = 8
export const PASSWORD_MAX = 256

export function hashPassword(password: string): Promise<string> {
  return hash(password, ARGON2ID)
}

export async function verifyPassword(stored: string, password: string): Promise<boolean> {
  try {
    return await verify(stored, password)
  } catch {
    return false
  }
}

let dummy: Promise<string> | null = null

/**
 * Computes the dummy hash ahead of time, so even the first unknown-email sign-in costs one verification, not a hash and
 * a verification.
 */
export function primeDummyHash(): void {
  dummy ??= hashPassword('cairn-dummy-password-for-timing')
}

/**
 * Spends the same work as a real verification, for an email that has no account, so
 * the answer's timing does not tell whether the account exists.
 */
export async function verifyAgainstDummy(password: string): Promise<false> {
  primeDummyHash()
  await verifyPassword(await dummy!, password)
  return false
}
