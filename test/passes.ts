// CI runs the suite twice: on the embedded database, then on PostgreSQL (DATABASE_URL set).
// A file whose subject does not depend on which database serves the app runs on the embedded
// pass only: the embedded database itself and the process's start (those spawn servers with
// DATABASE_URL cleared, so the second pass would repeat the first exactly), the console in a
// browser (its API is tested on both passes) and the sandbox's confinement.

/** The reason such a file's tests skip on the PostgreSQL pass, or false on the embedded one. */
export const embeddedPassOnly: string | false = process.env.DATABASE_URL
  ? 'independent of the database kind: runs on the embedded pass only'
  : false
