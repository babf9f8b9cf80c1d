import { sql } from 'drizzle-orm'
import { check, customType, index, integer, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core'
import { ts } from '../db/columns.js'
import { TASK_STATUSES } from '../../schemas/tasks.js'
import { organizations, users } from '../auth/tables.js'
import { sqlList } from '../db/sql-list.js'

/**
 * Fractional position keys compare byte by byte, as fractional-indexing generates them; a locale collation would not.
 */
const byteText = customType<{ data: string }>({ dataType: () => 'text collate "C"' })

export type TaskStatus = (typeof TASK_STATUSES)[number]

/** A project groups tasks; archiving keeps it and its tasks. */
export const projects = pgTable(
  'projects',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    archivedAt: ts('archived_at'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [index('projects_org_idx').on(t.orgId, t.id)]
)

/**
 * A card on the board. A column is (org, project, status); `position` orders
 * it, and a move writes only the moved task (a key between its new neighbours).
 */
export const tasks = pgTable(
  'tasks',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    projectId: text('project_id').references(() => projects.id, { onDelete: 'cascade' }),
    title: text('title').notNull(),
    description: text('description').notNull().default(''),
    status: text('status').$type<TaskStatus>().notNull(),
    position: byteText('position').notNull(),
    runId: text('run_id'),
    assigneeId: text('assignee_id').references(() => users.id, { onDelete: 'set null' }),
    revision: integer('revision').notNull().default(1),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    uniqueIndex('tasks_column_position_idx').on(t.orgId, sql`coalesce(${t.projectId}, '')`, t.status, t.position),
    index('tasks_run_idx').on(t.runId),
    check('tasks_status_check', sql`${t.status} in (${sqlList(TASK_STATUSES)})`)
  ]
)
