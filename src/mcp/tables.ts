import { sql } from 'drizzle-orm'
import { boolean, check, index, integer, jsonb, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'

/** A tool a server listed: its name, description and input schema (JSON Schema), as offered to runs. */
export interface ListedTool {
  name: string
  description: string | null
  inputSchema: Record<string, unknown>
}

/**
 * An org's MCP server (its tools are offered to runs as `mcp__<name>__<tool>`). Header
 * values are not here: each is an internal secret (`mcp:<id>:header:<name>`); only their
 * names are. `tools` is what the last successful connection listed.
 *
 * Its state is shared by every instance: a server whose connection failed has `failures`
 * (in a row), `failingSince` and `nextCheckAt`; run starts skip it (no connection) until the
 * background check (src/mcp/checker.ts) reaches it again, each failed check waiting longer.
 */
export const mcpServers = pgTable(
  'mcp_servers',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    url: text('url').notNull(),
    headerNames: jsonb('header_names').$type<string[]>().notNull().default([]),
    ready: boolean('ready').notNull().default(false),
    lastError: text('last_error'),
    tools: jsonb('tools').$type<ListedTool[]>().notNull().default([]),
    lastCheckedAt: ts('last_checked_at'),
    /** failed connections in a row (0 while it answers) */
    failures: integer('failures').notNull().default(0),
    /** when the current run of failures began */
    failingSince: ts('failing_since'),
    /** when the background check tries it again; null while it answers */
    nextCheckAt: ts('next_check_at'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    uniqueIndex('mcp_servers_org_name_idx').on(t.orgId, t.name),
    index('mcp_servers_org_idx').on(t.orgId, t.id),
    index('mcp_servers_next_check_idx').on(t.nextCheckAt),
    check('mcp_servers_name_check', sql`${t.name} ~ '^[a-z0-9_-]{1,32}$'`)
  ]
)

/**
 * A session of Cairn's own MCP endpoint (`Mcp-Session-Id`), kept in the database so that
 * any instance serves its next request: each request builds its MCP server afresh and only
 * checks here that the session is live and belongs to the same caller.
 */
export const mcpSessions = pgTable(
  'mcp_sessions',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    /** who opened it: `user:<id>`, `key:<id>` or `dev:<id>`; another caller's request is refused */
    principal: text('principal').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    lastUsedAt: ts('last_used_at').notNull().defaultNow()
  },
  (t) => [index('mcp_sessions_used_idx').on(t.lastUsedAt)]
)
