// CI runs the suite twice: on the embedded database, then on PostgreSQL (DATABASE_URL set).
// A file whose subject does not depend on which database serves the app runs on the embedded
// pass only: the embedded database itself and the process's start (those spawn servers with
// DATABASE_URL cleared, so the second pass would repeat the first exactly), the console in a
// browser (its API is tested on both passes), the sandbox's confinement, its terminal and
// desktop, the HTTP layer's refusals and headers, the route index and the OpenAPI document
// with the clients generated from it: what they test is the same code on either database.

/** The reason such a file's tests skip on the PostgreSQL pass, or false on the embedded one. */
export const embeddedPassOnly: string | false = process.env.DATABASE_URL
  ? 'independent of the database kind: runs on the embedded pass only'
  : false

/** The options of a test in such a file. */
export const embeddedOnly = { skip: embeddedPassOnly }
