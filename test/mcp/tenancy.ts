import { sql } from 'drizzle-orm'
import { newId } from '../../src/db/ids.js'
import { mcpServers } from '../../src/mcp/tables.js'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    // seeded in the database: the attacker's calls must be 404s before any connection to the
    // server could be made (its address is not even resolvable)
    name: 'mcp servers',
    families: ['/api/mcp-servers/:id'],
    lists: ['GET /api/mcp-servers'],
    async seed(app, owner) {
      const id = newId()
      await app.db.insert(mcpServers).values({
        id,
        orgId: owner.org.id,
        name: `fixture-${id.slice(-8)}`,
        url: 'https://mcp.example.test/mcp',
        headerNames: ['authorization'],
        ready: true,
        tools: [{ name: 'lookup', description: null, inputSchema: { type: 'object' } }]
      })
      await app.secrets.internal.put(owner.org.id, `mcp:${id}:header:authorization`, `Bearer token of ${owner.org.id}`)
      return { id }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select id, name, url, ready, last_error, last_checked_at, tools from mcp_servers where org_id = ${owner.org.id} order by id`
      ),
      await rows(
        app,
        sql`select name, sealed from secrets where org_id = ${owner.org.id} and name like 'cairn:mcp:%' order by name`
      )
    ]
  }
]
