import { Cron } from 'croner'
import cronstrue from 'cronstrue'

/**
 * Schedules: five-field cron (and @daily-style nicknames) in an IANA time
 * zone, with croner. DST follows classic cron: an expression whose minute and hour are
 * fixed values (lists and ranges included) fires a time skipped by spring-forward once at
 * the first instant after the gap, and a time repeated by fall-back once at its first
 * occurrence; one with `*` or a step in those fields keeps its UTC rhythm
 * (croner's `fixedTimeRule: 'no-wildcard'`).
 */

export interface Schedule {
  cron: string
  timezone: string
}

export type ScheduleProblem = { path: '/body/cron' | '/body/timezone'; message: string }

const compiled = new Map<string, Cron>()
const MAX_COMPILED = 10_000

/** An IANA zone name ICU knows (aliases like `US/Eastern` included); offsets like `+02:00` are not zones. */
export function isTimeZone(zone: string): boolean {
  if (!/^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/.test(zone)) return false
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone })
    return true
  } catch {
    return false
  }
}

function build(s: Schedule): Cron {
  return new Cron(s.cron, { timezone: s.timezone, paused: true, mode: '5-part', fixedTimeRule: 'no-wildcard' })
}

/** The schedule, compiled once per instance (the scheduler computes thousands a minute). */
export function cronOf(s: Schedule): Cron {
  const key = `${s.timezone}\u0000${s.cron}`
  let cron = compiled.get(key)
  if (!cron) {
    if (compiled.size >= MAX_COMPILED) compiled.clear()
    cron = build(s)
    compiled.set(key, cron)
  }
  return cron
}

/** Why a schedule cannot be kept (bad syntax, unknown zone, never fires), or null. Answers at once. */
export function scheduleProblem(s: Schedule, now: Date): ScheduleProblem | null {
  if (!isTimeZone(s.timezone))
    return {
      path: '/body/timezone',
      message: `${JSON.stringify(s.timezone)} is not an IANA time zone (like Europe/Berlin or UTC)`
    }
  let cron: Cron
  try {
    cron = build(s)
  } catch (err) {
    return { path: '/body/cron', message: cronMessage(err) }
  }
  // croner's search is bounded, so `0 0 30 2 *` answers null at once instead of looping
  if (cron.nextRun(now) === null)
    return { path: '/body/cron', message: 'this expression never fires (a date that does not exist?)' }
  return null
}

function cronMessage(err: unknown): string {
  const text = err instanceof Error ? err.message.replace(/^CronPattern:\s*/, '') : 'invalid expression'
  return `not a five-field cron expression (minute hour day-of-month month day-of-week): ${text}`
}

/**
 * The last answer of `nextRuns` per schedule and count. A list of the org's automations shows each one's next
 * five times on every read, and finding them is croner's dearest call; the answer stays exact until its first
 * time passes: seen from any instant between the one it was computed at and its first time, nothing fires before
 * that first time, so the next `n` are the same.
 */
const upcoming = new Map<string, { from: number; runs: Date[] }>()

/** The next `n` fire times strictly after `from`. */
export function nextRuns(s: Schedule, from: Date, n: number): Date[] {
  const key = `${s.timezone}\u0000${s.cron}\u0000${n}`
  const at = from.getTime()
  const known = upcoming.get(key)
  if (known && known.runs.length === n && known.from <= at && at < known.runs[0]!.getTime()) return [...known.runs]
  const runs = cronOf(s).nextRuns(n, from)
  if (upcoming.size >= MAX_COMPILED) upcoming.clear()
  upcoming.set(key, { from: at, runs })
  return [...runs]
}

export function nextRun(s: Schedule, from: Date): Date | null {
  return cronOf(s).nextRun(from) ?? null
}

/** The latest fire time at or before `at`, if any. */
export function latestRun(s: Schedule, at: Date): Date | null {
  return cronOf(s).previousRuns(1, new Date(at.getTime() + 1))[0] ?? null
}

/** The cron in words (`At 02:30`), or the expression itself when cronstrue cannot say it. */
export function describeCron(cron: string): string {
  try {
    return cronstrue.toString(cron, { use24HourTimeFormat: true, throwExceptionOnParseError: true })
  } catch {
    return cron
  }
}

/**
 * What a due automation fires now. `due` is its stored next tick (at or before `now`).
 * One tick found within `graceMs` of its time fires. When ticks were missed (no instance
 * ran at their time), `latest` fires one run for the latest of them and `skip` fires none
 * (a latest tick still within the grace counts as on time). Returns the tick to fire,
 * if any, and the next tick after `now`.
 */
export function planFire(
  s: Schedule & { catchUp: 'skip' | 'latest' },
  due: Date,
  now: Date,
  graceMs: number
): { fire: Date | null; next: Date | null } {
  const afterDue = nextRun(s, due)
  // the common case, one croner step: the due tick is the latest, and the one after it the next
  const onlyDue = afterDue === null || afterDue > now
  const latest = onlyDue ? due : (latestRun(s, now) ?? due)
  const next = onlyDue ? afterDue : nextRun(s, now)
  const onTime = now.getTime() - latest.getTime() <= graceMs
  return { fire: onTime || s.catchUp === 'latest' ? latest : null, next }
}
