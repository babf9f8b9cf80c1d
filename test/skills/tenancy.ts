import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'skills',
    families: ['/api/skills/:id'],
    lists: ['GET /api/skills'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers: { cookie: owner.cookie },
        payload: { name: 'fixture-skill', description: `fixture ${owner.org.id}`, instructions: 'Say hello.' }
      })
      return { id: (res.json() as { skill: { id: string } }).skill.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select s.id, s.version, s.description,
      (select count(*)::int from runs r where r.org_id = s.org_id) as runs from skills s where s.org_id = ${owner.org.id} order by s.id`
      ),
    body: (route) =>
      route === 'PATCH /api/skills/:id'
        ? { description: 'attack', version: 1 }
        : route.startsWith('POST')
          ? { input: 'attack' }
          : undefined
  },
  {
    name: 'skill proposals',
    families: ['/api/skills/proposals/:id'],
    lists: ['GET /api/skills/proposals'],
    async seed(app, owner) {
      const skillMd = `---\nname: proposed-${owner.org.id
        .slice(-8)
        .toLowerCase()
        .replace(/[^a-z0-9]/g, 'x')}\ndescription: fixture\n---\n\nDo it.\n`
      const res = await app.inject({
        method: 'POST',
        url: '/api/skills/proposals',
        headers: { cookie: owner.cookie },
        payload: { skillMd }
      })
      return { id: (res.json() as { proposal: { id: string } }).proposal.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, state, skill_id from skill_proposals where org_id = ${owner.org.id} order by id`)
  },
  {
    name: 'playbooks',
    families: ['/api/playbooks/:id'],
    lists: ['GET /api/playbooks'],
    async seed(app, owner) {
      const skill = await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers: { cookie: owner.cookie },
        payload: { name: 'playbook-step', description: 'fixture', instructions: 'Step.' }
      })
      const skillId = (skill.json() as { skill: { id: string } }).skill.id
      const res = await app.inject({
        method: 'POST',
        url: '/api/playbooks',
        headers: { cookie: owner.cookie },
        payload: { name: `fixture ${owner.org.id}`, steps: [{ skillId }] }
      })
      return { id: (res.json() as { playbook: { id: string } }).playbook.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select p.id, p.name, (select count(*)::int from playbook_steps s where s.playbook_id = p.id) as steps,
      (select count(*)::int from playbook_runs r where r.org_id = p.org_id) as runs from playbooks p where p.org_id = ${owner.org.id} order by p.id`
      ),
    body: (route) =>
      route === 'PATCH /api/playbooks/:id' ? { name: 'attack' } : route.startsWith('POST') ? {} : undefined
  }
]
