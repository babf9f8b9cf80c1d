import { sql } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG, DEV_USER } from '../../src/auth/dev-org.js'
import { rowsOf } from '../../src/db/client.js'
import { addMember, createOrg, signIn, signUp, signUpWithOrg, uniqueEmail } from '../helper.js'
import { buildAuthApp } from './group.js'

// the default identity cache (1 s) stays on: changes must still show on the very next request
const app = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'false' } })

const whoami = (cookie: string) => app.inject({ method: 'GET', url: '/api/probe/whoami', headers: { cookie } })
const memberUrl = (orgId: string, userId: string) => `/api/auth/organizations/${orgId}/members/${userId}`

t.test('creating an org: slug from the name, the caller owns it, it becomes active', async (t) => {
  const user = await signUp(app)
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: user.cookie },
    payload: { name: 'Acme Rockets, Inc.' }
  })
  t.equal(res.statusCode, 201)
  const org = res.json().organization
  t.match(org, { name: 'Acme Rockets, Inc.', slug: 'acme-rockets-inc', role: 'owner', id: String, createdAt: String })
  const me = await whoami(user.cookie)
  t.equal(me.statusCode, 200)
  t.same(me.json().principal, {
    kind: 'user',
    orgId: org.id,
    userId: user.user.id,
    role: 'owner',
    sessionId: me.json().principal.sessionId
  })
  t.equal(me.json().realUser, user.user.id)
  const session = await app.inject({ method: 'GET', url: '/api/auth/session', headers: { cookie: user.cookie } })
  t.equal(session.json().session.activeOrganizationId, org.id)
  t.same(session.json().organizations, [{ id: org.id, name: org.name, slug: org.slug, role: 'owner' }])

  const clash = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: user.cookie },
    payload: { name: 'ACME ROCKETS, INC.' }
  })
  t.equal(clash.statusCode, 409, 'one person never has two organizations of the same name, whatever the case')
  t.equal(clash.json().error, 'conflict')
  t.match(clash.json().message, /already belong to an organization named "Acme Rockets, Inc\."/)
  // another person may call their team the same: its slug is made unique, never refused
  const other = await signUp(app)
  const twin = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: other.cookie },
    payload: { name: 'ACME rockets inc' }
  })
  t.equal(twin.statusCode, 201, 'a name differing only in case from another org of someone else')
  t.equal(twin.json().organization.slug, 'acme-rockets-inc-2')
  const third = await signUp(app)
  const triplet = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: third.cookie },
    payload: { name: 'Acme Rockets Inc' }
  })
  t.equal(triplet.json().organization.slug, 'acme-rockets-inc-3')
  const chosen = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: third.cookie },
    payload: { name: 'Chosen', slug: 'acme-rockets-inc' }
  })
  t.equal(chosen.statusCode, 409, 'a slug the caller chose that is taken')
  t.match(chosen.json().message, /acme-rockets-inc/)
  const dev = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: user.cookie },
    payload: { name: 'Mine', slug: 'dev' }
  })
  t.equal(dev.statusCode, 409, '`dev` belongs to the seeded dev org')
  const odd = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie: user.cookie },
    payload: { name: '日本語' }
  })
  t.equal(odd.statusCode, 201)
  t.match(odd.json().organization.slug, /^org$|^[a-z0-9-]+$/)
  for (const slug of ['Bad Slug', '-lead', 'trail-', 'x'.repeat(49), '']) {
    const bad = await app.inject({
      method: 'POST',
      url: '/api/auth/organizations',
      headers: { cookie: user.cookie },
      payload: { name: 'n', slug }
    })
    t.equal(bad.statusCode, 400, `slug ${JSON.stringify(slug)}`)
  }
  const anon = await app.inject({ method: 'POST', url: '/api/auth/organizations', payload: { name: 'Nobody' } })
  t.equal(anon.statusCode, 401)
  const nobody = rowsOf<{ n: number }>(
    await app.db.execute(sql`select count(*)::int as n from organizations where name = 'Nobody'`)
  )
  t.equal(nobody[0]!.n, 0)
})

t.test('a user with no organization: 403 no_organization on org routes, auth routes still work', async (t) => {
  const user = await signUp(app)
  const res = await whoami(user.cookie)
  t.equal(res.statusCode, 403)
  t.same(res.json(), {
    error: 'no_organization',
    message: 'you belong to no organization; create one or ask to be added'
  })
  const keys = await app.inject({ method: 'GET', url: '/api/keys', headers: { cookie: user.cookie } })
  t.equal(keys.json().error, 'no_organization')
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/auth/organizations', headers: { cookie: user.cookie } })).json()
      .organizations.length,
    0
  )
  const devOn = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const lonely = await signUp(devOn)
  const there = await devOn.inject({ method: 'GET', url: '/api/probe/whoami', headers: { cookie: lonely.cookie } })
  t.equal(there.statusCode, 403, 'a signed-in user is never quietly moved into the dev org')
  t.equal(there.json().error, 'no_organization')
})

t.test('switching the active org; only to an org you belong to', async (t) => {
  const user = await signUpWithOrg(app)
  const second = await createOrg(app, user.cookie)
  t.equal((await whoami(user.cookie)).json().principal.orgId, second.id)
  const back = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations/active',
    headers: { cookie: user.cookie },
    payload: { organizationId: user.org.id }
  })
  t.equal(back.statusCode, 200)
  t.same(back.json(), { activeOrganizationId: user.org.id })
  t.equal((await whoami(user.cookie)).json().principal.orgId, user.org.id, 'the very next request')

  const stranger = await signUpWithOrg(app)
  const foreign = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations/active',
    headers: { cookie: user.cookie },
    payload: { organizationId: stranger.org.id }
  })
  t.equal(foreign.statusCode, 403)
  t.equal(foreign.json().error, 'no_organization')
  const missing = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations/active',
    headers: { cookie: user.cookie },
    payload: { organizationId: '0190b8f0-0000-7000-8000-000000000000' }
  })
  t.equal(missing.statusCode, 403)
  t.equal((await whoami(user.cookie)).json().principal.orgId, user.org.id, 'unchanged')
  const anon = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations/active',
    payload: { organizationId: user.org.id }
  })
  t.equal(anon.statusCode, 401)
})

t.test('first-membership fallback: the oldest membership, ties broken on the org id', async (t) => {
  const owner = await signUp(app)
  const orgA = await createOrg(app, owner.cookie)
  const orgB = await createOrg(app, owner.cookie)
  const user = await signUp(app)
  await addMember(app, owner.cookie, orgB.id, user.user.email, 'member')
  await addMember(app, owner.cookie, orgA.id, user.user.email, 'member')
  const fresh = await signIn(app, user.user.email, user.password)
  t.equal((await whoami(fresh.cookie)).json().principal.orgId, orgB.id, 'B was joined first')

  await app.db.execute(sql`update members set created_at = '2020-01-01T00:00:00Z' where user_id = ${user.user.id}`)
  const tied = await signIn(app, user.user.email, user.password)
  const expected = [orgA.id, orgB.id].sort()[0]
  for (let i = 0; i < 3; i++)
    t.equal(
      (await whoami(tied.cookie)).json().principal.orgId,
      expected,
      'same created_at: the smaller org id, every time'
    )
  const list = await app.inject({ method: 'GET', url: '/api/auth/organizations', headers: { cookie: tied.cookie } })
  t.same(
    list.json().organizations.map((o: { id: string }) => o.id),
    [orgA.id, orgB.id].sort(),
    'listed in fallback order'
  )
})

t.test('members: add, change role, remove; owners and admins only', async (t) => {
  const owner = await signUpWithOrg(app)
  const admin = await signUp(app)
  const member = await signUp(app)
  const orgId = owner.org.id

  const added = await app.inject({
    method: 'POST',
    url: `/api/auth/organizations/${orgId}/members`,
    headers: { cookie: owner.cookie },
    payload: { email: admin.user.email.toUpperCase(), role: 'admin' }
  })
  t.equal(added.statusCode, 201)
  t.match(added.json().member, {
    organizationId: orgId,
    userId: admin.user.id,
    email: admin.user.email,
    name: admin.user.name,
    role: 'admin',
    createdAt: String
  })
  await addMember(app, admin.cookie, orgId, member.user.email, 'member')
  t.equal((await whoami(member.cookie)).json().principal.role, 'member', 'the new member acts in the org at once')

  const twice = await app.inject({
    method: 'POST',
    url: `/api/auth/organizations/${orgId}/members`,
    headers: { cookie: owner.cookie },
    payload: { email: member.user.email, role: 'member' }
  })
  t.equal(twice.statusCode, 409)
  // every member reads who belongs and with which role, oldest first
  const list = await app.inject({
    method: 'GET',
    url: `/api/auth/organizations/${orgId}/members`,
    headers: { cookie: member.cookie }
  })
  t.equal(list.statusCode, 200, list.body)
  t.same(
    list.json().items.map((m: { userId: string; role: string; email: string }) => [m.userId, m.role, m.email]),
    [
      [owner.user.id, 'owner', owner.user.email],
      [admin.user.id, 'admin', admin.user.email],
      [member.user.id, 'member', member.user.email]
    ]
  )
  t.match(list.json().items[0], { organizationId: orgId, name: owner.user.name, createdAt: String })
  for (const email of [uniqueEmail('ghost'), DEV_USER.email]) {
    const ghost = await app.inject({
      method: 'POST',
      url: `/api/auth/organizations/${orgId}/members`,
      headers: { cookie: owner.cookie },
      payload: { email, role: 'member' }
    })
    t.equal(ghost.statusCode, 404, email)
    t.equal(ghost.json().error, 'not_found')
  }

  // a member is not an admin
  const byMember = await app.inject({
    method: 'POST',
    url: `/api/auth/organizations/${orgId}/members`,
    headers: { cookie: member.cookie },
    payload: { email: uniqueEmail(), role: 'member' }
  })
  t.equal(byMember.statusCode, 403)
  t.same(byMember.json(), {
    error: 'organization_admin_required',
    message: 'this needs an organization owner or admin'
  })
  const patchByMember = await app.inject({
    method: 'PATCH',
    url: memberUrl(orgId, member.user.id),
    headers: { cookie: member.cookie },
    payload: { role: 'admin' }
  })
  t.equal(patchByMember.statusCode, 403, 'no self-promotion')
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/keys', headers: { cookie: member.cookie } })).json().error,
    'organization_admin_required'
  )
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/probe/admin', headers: { cookie: member.cookie } })).statusCode,
    403
  )

  // an admin cannot touch the owner role
  const promote = await app.inject({
    method: 'PATCH',
    url: memberUrl(orgId, admin.user.id),
    headers: { cookie: admin.cookie },
    payload: { role: 'owner' }
  })
  t.equal(promote.statusCode, 403)
  t.equal(promote.json().error, 'organization_owner_required')
  const demoteOwner = await app.inject({
    method: 'PATCH',
    url: memberUrl(orgId, owner.user.id),
    headers: { cookie: admin.cookie },
    payload: { role: 'member' }
  })
  t.equal(demoteOwner.statusCode, 403)
  const removeOwner = await app.inject({
    method: 'DELETE',
    url: memberUrl(orgId, owner.user.id),
    headers: { cookie: admin.cookie }
  })
  t.equal(removeOwner.statusCode, 403)

  const changed = await app.inject({
    method: 'PATCH',
    url: memberUrl(orgId, member.user.id),
    headers: { cookie: admin.cookie },
    payload: { role: 'admin' }
  })
  t.equal(changed.statusCode, 200)
  t.equal(changed.json().member.role, 'admin')
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/probe/admin', headers: { cookie: member.cookie } })).statusCode,
    200,
    'the new role applies at once'
  )

  const nobody = await app.inject({
    method: 'PATCH',
    url: memberUrl(orgId, '0190b8f0-0000-7000-8000-000000000000'),
    headers: { cookie: owner.cookie },
    payload: { role: 'admin' }
  })
  t.equal(nobody.statusCode, 404)
  for (const payload of [{ role: 'root' }, { role: 'admin', orgId }, {}]) {
    const bad = await app.inject({
      method: 'PATCH',
      url: memberUrl(orgId, member.user.id),
      headers: { cookie: owner.cookie },
      payload
    })
    t.equal(bad.statusCode, 400, JSON.stringify(payload))
  }
  const hostile = await app.inject({
    method: 'DELETE',
    url: memberUrl(orgId, "x' or 1=1 --"),
    headers: { cookie: owner.cookie }
  })
  t.equal(hostile.statusCode, 400)

  const removed = await app.inject({
    method: 'DELETE',
    url: memberUrl(orgId, member.user.id),
    headers: { cookie: admin.cookie }
  })
  t.equal(removed.statusCode, 204)
  const after = await whoami(member.cookie)
  t.equal(after.statusCode, 403, 'removal takes effect on the very next request')
  t.equal(after.json().error, 'no_organization')
})

t.test('removing a membership reaches another instance at once (NOTIFY), not after its cache expires', async (t) => {
  const owner = await signUpWithOrg(app)
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  // the second instance would keep a resolved session 10 s; only the broadcast can make it forget sooner
  const second = await buildAuthApp(t, {
    db: app.testDb,
    env: { ALLOW_DEV_ORG: 'false', IDENTITY_CACHE_MS: '10000' }
  })
  const viaSecond = () => second.inject({ method: 'GET', url: '/api/probe/whoami', headers: { cookie: member.cookie } })
  t.equal((await viaSecond()).statusCode, 200, 'cached there now')
  t.equal(
    (
      await app.inject({
        method: 'DELETE',
        url: memberUrl(owner.org.id, member.user.id),
        headers: { cookie: owner.cookie }
      })
    ).statusCode,
    204
  )
  let status = (await viaSecond()).statusCode
  for (let i = 0; i < 50 && status !== 403; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20))
    status = (await viaSecond()).statusCode
  }
  t.equal(status, 403)
})

t.test('the last owner can be neither demoted nor removed', async (t) => {
  const owner = await signUpWithOrg(app)
  const orgId = owner.org.id
  const demote = await app.inject({
    method: 'PATCH',
    url: memberUrl(orgId, owner.user.id),
    headers: { cookie: owner.cookie },
    payload: { role: 'admin' }
  })
  t.equal(demote.statusCode, 409)
  t.same(demote.json(), { error: 'conflict', message: 'the last owner cannot be demoted' })
  const remove = await app.inject({
    method: 'DELETE',
    url: memberUrl(orgId, owner.user.id),
    headers: { cookie: owner.cookie }
  })
  t.equal(remove.statusCode, 409)
  t.equal(remove.json().message, 'the last owner cannot be removed')
  t.equal((await whoami(owner.cookie)).json().principal.role, 'owner')

  // with a second owner, one may step down, but not both at once
  const other = await signUp(app)
  await addMember(app, owner.cookie, orgId, other.user.email, 'owner')
  const [a, b] = await Promise.all([
    app.inject({
      method: 'PATCH',
      url: memberUrl(orgId, owner.user.id),
      headers: { cookie: owner.cookie },
      payload: { role: 'member' }
    }),
    app.inject({ method: 'DELETE', url: memberUrl(orgId, other.user.id), headers: { cookie: other.cookie } })
  ])
  const statuses = [a.statusCode, b.statusCode]
  t.equal(statuses.filter((s) => s === 409).length, 1, 'exactly one of two concurrent owner exits is refused')
  t.equal(statuses.filter((s) => s === 200 || s === 204).length, 1, 'and the other succeeds')
  const owners = rowsOf<{ n: number }>(
    await app.db.execute(sql`select count(*)::int as n from members where org_id = ${orgId} and role = 'owner'`)
  )
  t.equal(owners[0]!.n, 1, 'one owner left')
})

t.test('members of another org: 404, nothing changed', async (t) => {
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  for (const [method, url, payload] of [
    ['GET', `/api/auth/organizations/${b.org.id}/members`, undefined],
    ['POST', `/api/auth/organizations/${b.org.id}/members`, { email: a.user.email, role: 'owner' }],
    ['PATCH', memberUrl(b.org.id, b.user.id), { role: 'member' }],
    ['DELETE', memberUrl(b.org.id, b.user.id), undefined]
  ] as const) {
    const res = await app.inject({ method, url, headers: { cookie: a.cookie }, ...(payload ? { payload } : {}) })
    t.equal(res.statusCode, 404, `${method} ${url}`)
    t.equal(res.json().error, 'not_found')
  }
  t.equal((await whoami(b.cookie)).json().principal.role, 'owner')
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: '/api/auth/organizations/active',
        headers: { cookie: a.cookie },
        payload: { organizationId: b.org.id }
      })
    ).statusCode,
    403
  )
})

t.test('dev-org access: anonymous requests act as the fallback, never as a real user', async (t) => {
  const devApp = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const res = await devApp.inject({ method: 'GET', url: '/api/probe/whoami' })
  t.equal(res.statusCode, 200)
  t.same(res.json(), {
    principal: { kind: 'dev', orgId: DEV_ORG.id, userId: DEV_USER.id, role: 'owner' },
    realUser: null
  })
  const user = await devApp.inject({ method: 'GET', url: '/api/probe/user' })
  t.equal(user.statusCode, 403)
  t.equal(user.json().error, 'user_required')
  t.equal(
    (await devApp.inject({ method: 'GET', url: '/api/auth/session' })).statusCode,
    401,
    'the dev fallback is not a session'
  )
  const minted = await devApp.inject({ method: 'POST', url: '/api/keys', payload: { name: 'dev key' } })
  t.equal(minted.statusCode, 403, 'the fallback mints no keys')
  t.same(minted.json(), { error: 'user_required', message: 'this route needs a signed-in user' })
  const listed = await devApp.inject({ method: 'GET', url: '/api/keys' })
  t.same(listed.json().items, [], 'nothing was minted')
  const off = await app.inject({ method: 'GET', url: '/api/probe/whoami' })
  t.equal(off.statusCode, 401)
  t.equal(off.json().error, 'unauthorized')
})
