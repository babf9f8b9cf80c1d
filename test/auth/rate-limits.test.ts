import { eq } from 'drizzle-orm'
import t from 'tap'
import { authRateLimits } from '../../src/auth/tables.js'
import { createTestDatabase, secondHandle, signUp, uniqueEmail, type Teardown } from '../helper.js'
import { buildAuthApp } from './group.js'

/**
 * The sign-in and sign-up brakes count in the database, so two instances on one database
 * (any number, behind a load balancer) hold the configured limit together instead of
 * each allowing it once.
 */

async function twoInstances(t: Teardown, env: Record<string, string>) {
  const shared = await createTestDatabase(t)
  const a = await buildAuthApp(t, { db: shared, env })
  const b = await buildAuthApp(t, { db: await secondHandle(t, shared, 3), env })
  return [a, b] as const
}
t.test(
  'failed sign-ins of one account on two instances: the limit holds at its number, then 429 on both',
  async (t) => {
    const [a, b] = await twoInstances(t, { AUTH_RATE_LIMIT_PER_ACCOUNT: '4', AUTH_RATE_LIMIT_PER_IP: '1000' })
    const { user } = await signUp(a, { password: 'right password' })
    const statuses: number[] = []
    for (let i = 0; i < 8; i++) {
      const app = i % 2 === 0 ? a : b
      const res = await app.inject({
        method: 'POST',
        url: '/api/auth/sign-in',
        payload: { email: user.email, password: 'wrong password' }
      })
      statuses.push(res.statusCode)
      if (res.statusCode === 429) {
        t.match(res.json(), { error: 'rate_limited', message: /too many attempts/ })
        t.ok(Number(res.headers['retry-after']) >= 1, 'Retry-After names the rest of the window')
      }
    }
    t.same(statuses, [401, 401, 401, 401, 429, 429, 429, 429], 'four failures in all, whichever instance heard them')
    // the right password is refused too while the window runs, on either instance
    t.equal(
      (
        await b.inject({
          method: 'POST',
          url: '/api/auth/sign-in',
          payload: { email: user.email, password: 'right password' }
        })
      ).statusCode,
      429
    )
    const [row] = await a.db
      .select()
      .from(authRateLimits)
      .where(eq(authRateLimits.key, `auth-sign-in:${user.email}`))
    t.equal(row?.points, 4, 'one counter row for the account, refused attempts not counted')
    t.ok(row!.expire! > new Date(), 'its window runs')

    // another account is not touched
    const other = await signUp(b, { password: 'right password' })
    t.equal(
      (
        await a.inject({
          method: 'POST',
          url: '/api/auth/sign-in',
          payload: { email: other.user.email, password: 'right password' }
        })
      ).statusCode,
      200
    )
  }
)

t.test('sign-ups of one email and attempts of one address are counted across instances', async (t) => {
  const [a, b] = await twoInstances(t, { AUTH_RATE_LIMIT_PER_ACCOUNT: '3', AUTH_RATE_LIMIT_PER_IP: '7' })
  const email = uniqueEmail('taken')
  const signUps: number[] = []
  for (let i = 0; i < 4; i++) {
    const res = await (i % 2 === 0 ? a : b).inject({
      method: 'POST',
      url: '/api/auth/sign-up',
      payload: { email, password: 'password123', name: 'Same' }
    })
    signUps.push(res.statusCode)
  }
  t.same(signUps, [201, 409, 409, 429], 'three sign-ups of one email, then refused')

  // the address has used 4 of its 7 attempts; 3 more anywhere, then 429 everywhere
  const more: number[] = []
  for (let i = 0; i < 5; i++) {
    const res = await (i % 2 === 0 ? b : a).inject({
      method: 'POST',
      url: '/api/auth/sign-in',
      payload: { email: uniqueEmail('nobody'), password: 'whatever1' }
    })
    more.push(res.statusCode)
  }
  t.same(more, [401, 401, 401, 429, 429])
})

t.test('bad input to sign-in is a 400, never a 5xx, and counts only against the address', async (t) => {
  const [a] = await twoInstances(t, { AUTH_RATE_LIMIT_PER_ACCOUNT: '2', AUTH_RATE_LIMIT_PER_IP: '1000' })
  for (const payload of [
    { email: 'x'.repeat(10_000), password: 'p' },
    { email: 'a\u0000b@example.com', password: 'password1' },
    {}
  ]) {
    const res = await a.inject({ method: 'POST', url: '/api/auth/sign-in', payload })
    t.equal(res.statusCode, 400)
    t.equal(res.json().error, 'validation_failed')
  }
  t.same(
    (await a.db.select().from(authRateLimits)).map((r) => r.key),
    ['auth-ip:127.0.0.1']
  )
})
