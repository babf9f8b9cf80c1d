import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { secretsUnavailable } from '../../plugins/errors.js'
import { filesDir, type Config } from '../config.js'
import type { RunSecrets } from '../runs/ports/secrets.js'
import { KeyRing, newKeyText, parseKey, parsePreviousKeys, type SecretKey } from './crypto.js'
import {
  deleteSecret,
  deleteSecrets,
  getSecret,
  keyCheckSample,
  listSecrets,
  putSecret,
  resealBatch,
  useSecrets,
  type SecretRow
} from './secrets-repo.js'

/** The secrets group's instance-wide side, as `app.secrets`. */
export interface SecretsService {
  /** null when this server has no key (Postgres without SECRETS_KEY): the routes answer 503 */
  ring: KeyRing | null
  put(
    orgId: string,
    name: string,
    value: string,
    updatedBy: string | null
  ): Promise<{ row: SecretRow; created: boolean }>
  list(
    orgId: string,
    page: { limit: number; cursor: string | undefined }
  ): Promise<{ items: SecretRow[]; nextCursor: string | null }>
  remove(orgId: string, name: string): Promise<boolean>
  /** the runs group's port */
  forRuns: RunSecrets
  /**
   * Credentials the platform keeps for an org (a provider's API key, a GitHub token, a
   * Slack signing secret), sealed like the org's secrets under names the secrets routes
   * and runs cannot name (`cairn:` + a name): never listed, never given to a run.
   */
  internal: InternalSecrets
  /** seals rows under previous keys again under the current one, until none is left (also run at start) */
  reseal(): Promise<{ moved: number; unopened: number }>
}

declare module 'fastify' {
  interface FastifyInstance {
    secrets: SecretsService
  }
}

export interface InternalSecrets {
  /** throws 503 secrets_unavailable without a key */
  put(orgId: string, name: string, value: string): Promise<void>
  /** null when there is none, or when no key of the ring opens it */
  open(orgId: string, name: string): Promise<string | null>
  /** removes these names; true when one was there */
  remove(orgId: string, names: string[]): Promise<boolean>
}

/** Internal names start with this, which SECRET_NAME_PATTERN (upper case first) never matches. */
export const INTERNAL_PREFIX = 'cairn:'

export const KEY_FILE = 'secrets.key'

/** The variables the secrets service reads (through `keyRingFor`): a read of another is a type error. */
export type SecretsConfig = Pick<Config, 'DATA_DIR' | 'DATABASE_URL' | 'SECRETS_KEY' | 'SECRETS_PREVIOUS_KEYS'>

/**
 * The key ring this server seals and opens with: SECRETS_KEY (and SECRETS_PREVIOUS_KEYS);
 * without it, on the embedded database, a key made once in DATA_DIR/secrets.key (0600);
 * on Postgres without it, none. A key file left from before SECRETS_KEY was set stays in
 * the ring as a previous key, so its rows move to the configured key by themselves.
 */
export function keyRingFor(config: SecretsConfig, warn: (message: string) => void): KeyRing | null {
  const file = join(filesDir(config), KEY_FILE)
  const embedded = config.DATABASE_URL === undefined
  let fileKey: SecretKey | null = null
  if (embedded) {
    try {
      fileKey = parseKey(readFileSync(file, 'utf8'), file)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    }
  }
  const previous = parsePreviousKeys(config.SECRETS_PREVIOUS_KEYS)
  if (config.SECRETS_KEY !== undefined) {
    // the ring keeps one entry per key id, so a key file holding SECRETS_KEY itself is no previous key
    return new KeyRing(parseKey(config.SECRETS_KEY, 'SECRETS_KEY'), fileKey ? [...previous, fileKey] : previous)
  }
  if (!embedded) return null
  if (!fileKey) {
    mkdirSync(filesDir(config), { recursive: true })
    const text = newKeyText()
    // 'wx': made once; a second process on this DATA_DIR cannot get here (the data-dir lock)
    writeFileSync(file, `${text}\n`, { mode: 0o600, flag: 'wx' })
    chmodSync(file, 0o600)
    fileKey = parseKey(text, file)
  }
  warn(`SECRETS_KEY is unset: secrets are sealed with the key in ${file}. Back it up with the data, or set SECRETS_KEY`)
  return new KeyRing(fileKey, previous)
}

const RESEAL_BATCH = 100
/** rows the start-up check tries to open */
const KEY_CHECK_SAMPLE = 20

/** The configured keys open none of the secrets stored in the database: the instance does not start. */
export class SecretsKeyMismatch extends Error {
  override name = 'SecretsKeyMismatch'
}

/**
 * At start: when the database holds secrets, the ring must open at least one of them; an
 * instance with another SECRETS_KEY (a typo, a key from another deployment) would otherwise
 * answer that every secret is missing. Throws SecretsKeyMismatch, naming the key ids only.
 */
export async function checkKeyOpensStored(db: FastifyInstance['db'], ring: KeyRing): Promise<void> {
  const ids = [ring.current.id, ...ring.previousIds]
  const { rows, any } = await keyCheckSample(db, ids, KEY_CHECK_SAMPLE)
  if (!any) return
  if (rows.some((row) => ring.open(row.orgId, row.name, row.keyId, Buffer.from(row.sealed, 'base64')) !== null)) return
  throw new SecretsKeyMismatch(
    rows.length === 0
      ? `SECRETS_KEY (key id ${ring.current.id}) opens none of the org secrets stored in the database: they were sealed with another key. Set SECRETS_KEY to that key (or list it in SECRETS_PREVIOUS_KEYS to rotate)`
      : `SECRETS_KEY (key id ${ring.current.id}) opens none of the org secrets sealed under its key id: they were altered, or the key is not the one that sealed them`
  )
}

/** Org secrets: sealing, the run port, and re-sealing after a key rotation. */
export default fp(
  async function secretsService(app: FastifyInstance, opts: { config: SecretsConfig }) {
    const db = app.db
    const log = app.log.child({ component: 'secrets' })
    const ring = keyRingFor(opts.config, (message) => log.warn(message))
    if (ring) {
      try {
        await checkKeyOpensStored(db, ring)
      } catch (err) {
        if (err instanceof SecretsKeyMismatch) log.error(`refusing to start: ${err.message}`)
        throw err
      }
    }
    const usable = (): KeyRing => {
      if (!ring) throw secretsUnavailable()
      return ring
    }
    const open = (row: SecretRow) => usable().open(row.orgId, row.name, row.keyId, Buffer.from(row.sealed, 'base64'))

    async function reseal(): Promise<{ moved: number; unopened: number }> {
      if (!ring) return { moved: 0, unopened: 0 }
      let moved = 0
      let unopened = 0
      for (;;) {
        const batch = await resealBatch(db, ring.previousIds, RESEAL_BATCH, (row) => {
          const value = open(row)
          if (value === null) return null
          const { keyId, sealed } = ring.seal(row.orgId, row.name, value)
          return { keyId, sealed: sealed.toString('base64') }
        })
        moved += batch.moved
        unopened += batch.unopened
        if (batch.moved === 0) return { moved, unopened }
      }
    }

    app.decorate('secrets', {
      ring,
      async put(orgId, name, value, updatedBy) {
        const { keyId, sealed } = usable().seal(orgId, name, value)
        return putSecret(db, orgId, { name, keyId, sealed: sealed.toString('base64'), updatedBy })
      },
      list(orgId, page) {
        usable()
        return listSecrets(db, orgId, page)
      },
      remove(orgId, name) {
        usable()
        return deleteSecret(db, orgId, name)
      },
      forRuns: {
        async open(orgId, names) {
          usable()
          const rows = await useSecrets(db, orgId, names)
          const values = rows.flatMap((row) => {
            const value = open(row)
            return value === null ? [] : [{ name: row.name, value }]
          })
          const found = new Set(values.map((v) => v.name))
          return { values, missing: names.filter((n) => !found.has(n)) }
        }
      },
      internal: {
        async put(orgId, name, value) {
          const full = INTERNAL_PREFIX + name
          const { keyId, sealed } = usable().seal(orgId, full, value)
          await putSecret(db, orgId, { name: full, keyId, sealed: sealed.toString('base64'), updatedBy: null })
        },
        async open(orgId, name) {
          const row = await getSecret(db, orgId, INTERNAL_PREFIX + name)
          return row ? open(row) : null
        },
        async remove(orgId, names) {
          return (
            (await deleteSecrets(
              db,
              orgId,
              names.map((n) => INTERNAL_PREFIX + n)
            )) > 0
          )
        }
      },
      reseal
    } satisfies SecretsService)

    let resealing: Promise<unknown> = Promise.resolve()
    app.addHook('onReady', async () => {
      if (!ring || ring.previousIds.length === 0) return
      // in the background: a start never waits for a rotation
      resealing = reseal()
        .then(({ moved, unopened }) => {
          if (moved > 0) log.info({ moved }, 'secrets sealed again under the current key')
          if (unopened > 0)
            log.warn(
              { unopened },
              'secrets under a previous key that it does not open (altered?) were left as they are'
            )
        })
        .catch((err: unknown) =>
          log.warn({ err }, 're-sealing secrets under the current key stopped; it resumes at the next start')
        )
    })
    // a re-sealing cut short resumes at the next start
    app.addHook('preClose', async () => {
      await app.shutdown.drain('re-sealing secrets', () => resealing)
    })
  },
  { name: 'secrets', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
