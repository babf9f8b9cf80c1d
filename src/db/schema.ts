// Every domain's drizzle tables, gathered for the drizzle client and drizzle-kit.
export * from '../auth/tables.js'
export * from '../runs/tables.js'
export * from '../runtime/tables.js'
export * from '../memory/tables.js'
export * from '../artifacts/tables.js'
export * from '../knowledge/tables.js'
export * from '../../plugins/idempotency/tables.js'
